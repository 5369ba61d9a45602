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
  # sharc's bootstrap under MPICH's mpiexec (Hydra); skipped without mpich
  add_test(NAME mp.bench.hydra COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_test.sh
           $<TARGET_FILE:sharcrun> $<TARGET_FILE:sharc-bench> hydra)
  set_tests_properties(mp.bench.hydra PROPERTIES TIMEOUT 120 LABELS mp PROCESSORS 2
                       SKIP_RETURN_CODE 77)
endif()
