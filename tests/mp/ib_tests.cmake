# The ib transport through real processes (label mp and ib). Where no RDMA
# port is active, mp.ib.refused checks that SHARC_TRANSPORT=ib fails at once
# on every rank with the reason, and the collective runs skip (77) saying
# why; on a machine with InfiniBand, RoCE or Soft-RoCE it is the reverse.
# Included by tests/mp/CMakeLists.txt.
add_test(NAME mp.ib.refused
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ib_test.sh refused ${SHARC_MP_RUN}
          $<TARGET_FILE:init_only> ${SHARC_HAVE_IBVERBS})
set_tests_properties(mp.ib.refused PROPERTIES TIMEOUT 120 LABELS "mp;ib"
                     PROCESSORS 2 SKIP_RETURN_CODE 77)
foreach(n 2 4)
  # every collective, and send/recv with groups and all_to_allv
  foreach(what coll p2p)
    add_test(NAME mp.${what}.ib.n${n}
      COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ib_test.sh coll ${SHARC_MP_RUN}
              $<TARGET_FILE:${what}_check> ${SHARC_HAVE_IBVERBS} ${n})
    set_tests_properties(mp.${what}.ib.n${n} PROPERTIES TIMEOUT 600
                         LABELS "mp;ib" PROCESSORS ${n} SKIP_RETURN_CODE 77)
  endforeach()
endforeach()
