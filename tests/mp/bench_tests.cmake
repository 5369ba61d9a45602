# sharc-bench: nccl-tests layout, validation, JSON, the corruption switch;
# with MPI, --compare mpi under mpirun; sharc under MPICH's mpiexec.
# Included by tests/mp/CMakeLists.txt.
if(TARGET sharc-bench)
  add_test(NAME mp.bench COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_test.sh
           $<TARGET_FILE:sharcrun> $<TARGET_FILE:sharc-bench> core)
  set_tests_properties(mp.bench PROPERTIES TIMEOUT 120 LABELS mp PROCESSORS 2)
  add_test(NAME mp.bench.mpi COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_test.sh
           $<TARGET_FILE:sharcrun> $<TARGET_FILE:sharc-bench> mpi)
  set_tests_properties(mp.bench.mpi PROPERTIES TIMEOUT 120 LABELS mp PROCESSORS 2
                       SKIP_RETURN_CODE 77)
  # Slices that are no power of two (4000 bytes, 3968 after the executor's
  # rounding) in a 64 KiB shared-memory FIFO, every size validated: a
  # receiver's tail then stops at odd positions inside payloads, up to the
  # FIFO's last byte (an experiment that read 8 bytes at any tail, not only
  # where a header is due, crashed here; bench/results/shm_small_flag).
  add_test(NAME mp.bench.slices COMMAND $<TARGET_FILE:sharcrun> -n 2
           --timeout 100 $<TARGET_FILE:sharc-bench>
           all_gather,all_reduce,broadcast -b 4K -e 1M -f 4 -n 50 -w 5 -c 1
           --limits 0)
  set_tests_properties(mp.bench.slices PROPERTIES TIMEOUT 120 LABELS mp
    PROCESSORS 2 ENVIRONMENT
    "SHARC_TRANSPORT=shm;SHARC_SHM_FIFO_BYTES=65536;SHARC_SLICE_BYTES=4000")
  # sharc's bootstrap under MPICH's mpiexec (Hydra); skipped without mpich
  add_test(NAME mp.bench.hydra COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_test.sh
           $<TARGET_FILE:sharcrun> $<TARGET_FILE:sharc-bench> hydra)
  set_tests_properties(mp.bench.hydra PROPERTIES TIMEOUT 120 LABELS mp PROCESSORS 2
                       SKIP_RETURN_CODE 77)
endif()
