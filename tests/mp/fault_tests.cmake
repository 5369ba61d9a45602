# Fault injection (SHARC_FAULT in comm/fault/fault.h; tests only): a rank
# killed mid-collective at a byte count, a dropped connection, a delay
# shorter and longer than SHARC_TIMEOUT, a corrupted payload and header,
# malformed specs. Included by tests/mp/CMakeLists.txt; driven by
# fault_test.sh with fault_rank (the script says what each case asserts).
# Timing-sensitive: each runs alone. Every job runs under `timeout 60` and
# sharcrun --grace 20 inside the script; the family takes about 40 s.
add_executable(fault_rank fault_rank.c)
target_include_directories(fault_rank PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(fault_rank PRIVATE sharc)

set(SHARC_FAULT_SH ${CMAKE_CURRENT_SOURCE_DIR}/fault_test.sh)
foreach(tp shm tcp)
  foreach(case kill kill-recv drop drop-recv delay-ok delay-timeout
               corrupt-payload corrupt-header)
    sharc_mp_test(mp.fault.${case}.${tp} 120 4 ""
      bash ${SHARC_FAULT_SH} ${SHARC_MP_RUN} $<TARGET_FILE:fault_rank>
      ${case} ${tp})
    set_tests_properties(mp.fault.${case}.${tp} PROPERTIES RUN_SERIAL TRUE)
  endforeach()
endforeach()
sharc_mp_test(mp.fault.badspec 120 2 ""
  bash ${SHARC_FAULT_SH} ${SHARC_MP_RUN} $<TARGET_FILE:fault_rank> badspec)
