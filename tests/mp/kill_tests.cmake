# A rank dies: every survivor fails on its own within seconds,
# prints its flight recorder and names the dead rank, and no shared-memory
# segment of the job stays in /dev/shm. Included by tests/mp/CMakeLists.txt;
# driven by kill_test.sh with kill_rank. Timing-sensitive: each runs alone.
#
#   mp.kill.<tp>, mp.kill.tree.<tp>  8 ranks, rank 5 killed mid-all_reduce
#                                    (the cost model's algorithm; tree)
#   mp.kill.matrix.<tp>.<coll>       4 ranks, ranks 0, 1 (tcp: 2) and 3 killed
#                                    in turn mid-all_gather, reduce_scatter,
#                                    all_reduce, reduce (to rank 0),
#                                    all_to_all, gather (to rank 0) or
#                                    scatter (from rank 0), send_recv
#                                    (all-to-all's blocks by grouped sends
#                                    and receives) or all_to_allv
#   mp.kill.setup.shm                rank 0, then 3, dies the instant its
#                                    segment appears; rank 1 instead of
#                                    removing its name: survivors remove it
#   mp.kill.sweep.shm                every rank dies in setup: sharcrun removes
#                                    the segments
#   mp.kill.abort.<tp>               rank 1 calls sharc_comm_abort: the others
#                                    fail with SHARC_ERR_ABORTED naming it
#   mp.kill.clean.<tp>               coll_check --small on 4 ranks leaves
#                                    nothing in /dev/shm
#
# Budget: about 45 s for the family on 2 cores (plain build). Each job runs
# under `timeout 60` and sharcrun --grace 20 inside the script, so the
# script, not CTest, stops the ranks.

set(SHARC_KILL_SH ${CMAKE_CURRENT_SOURCE_DIR}/kill_test.sh)

# sharc_kill_test(NAME TIMEOUT NPROC ENV ARGS...): kill_test.sh ARGS.
function(sharc_kill_test name timeout nproc env)
  sharc_mp_test(${name} ${timeout} ${nproc} "${env}"
    bash ${SHARC_KILL_SH} ${SHARC_MP_RUN} ${ARGN})
  set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
endfunction()

foreach(tp shm tcp)
  sharc_kill_test(mp.kill.${tp} 120 8 "" $<TARGET_FILE:kill_rank> ${tp})
  sharc_kill_test(mp.kill.tree.${tp} 120 8 "SHARC_ALGO=tree"
    $<TARGET_FILE:kill_rank> ${tp})
endforeach()

foreach(tp shm tcp)
  if(tp STREQUAL "shm")
    set(kills "0 1 3")
  else()
    set(kills "0 2 3")
  endif()
  foreach(coll all_gather reduce_scatter all_reduce reduce all_to_all gather
          scatter send_recv all_to_allv)
    sharc_kill_test(mp.kill.matrix.${tp}.${coll} 240 4 ""
      $<TARGET_FILE:kill_rank> ${tp} -n 4 --kill "${kills}" --coll ${coll})
  endforeach()
  sharc_kill_test(mp.kill.abort.${tp} 120 4 ""
    $<TARGET_FILE:kill_rank> ${tp} -n 4 --kill 1 --at abort)
  sharc_kill_test(mp.kill.clean.${tp} 120 4 ""
    $<TARGET_FILE:coll_check> ${tp} -n 4 --clean -- --small)
endforeach()
sharc_kill_test(mp.kill.setup.shm 120 4 ""
  $<TARGET_FILE:kill_rank> shm -n 4 --kill "0 3" --at publish)
sharc_kill_test(mp.kill.setup.unlink.shm 120 4 ""
  $<TARGET_FILE:kill_rank> shm -n 4 --kill 1 --at unlink)
sharc_kill_test(mp.kill.sweep.shm 120 4 ""
  $<TARGET_FILE:kill_rank> shm -n 4 --at sweep)
