# SHARC_CHECK=1: collective signatures compared before data moves.
# Included by tests/mp/CMakeLists.txt.
#
#   mp.check.coll.<tp>.n<N>   coll_check --small passes unchanged with it on
#   mp.check.mismatch.<tp>    every way of disagreeing fails with
#                             SHARC_ERR_MISMATCH on every rank, 2-4 ranks
#   mp.check.off.shm          without it, a count mismatch still errors
#                             (the shm transport's message headers)
add_executable(mismatch mismatch.c)
target_include_directories(mismatch PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(mismatch PRIVATE sharc)

foreach(tp shm tcp)
  foreach(n 2 4)
    sharc_mp_test(mp.check.coll.${tp}.n${n} 120 ${n}
      "SHARC_CHECK=1;SHARC_TRANSPORT=${tp};SHARC_TIMEOUT=30"
      ${SHARC_MP_RUN} -n ${n} --timeout 100 $<TARGET_FILE:coll_check> --small)
  endforeach()
  sharc_mp_test(mp.check.mismatch.${tp} 120 4 ""
    bash ${CMAKE_CURRENT_SOURCE_DIR}/mismatch_test.sh ${SHARC_MP_RUN}
    $<TARGET_FILE:mismatch> ${tp} on)
endforeach()
# gpu.check.mismatch: the same cases on device memory, calls on a CUDA
# stream (the direct GPU path checks each call as it is enqueued).
if(SHARC_HAVE_CUDA)
  target_compile_definitions(mismatch PRIVATE SHARC_HAVE_CUDA=1)
  target_link_libraries(mismatch PRIVATE CUDA::cudart)
  add_test(NAME gpu.check.mismatch COMMAND bash
    ${CMAKE_CURRENT_SOURCE_DIR}/mismatch_test.sh ${SHARC_MP_RUN}
    $<TARGET_FILE:mismatch> shm on cuda)
  set_tests_properties(gpu.check.mismatch PROPERTIES TIMEOUT 240 LABELS gpu
    PROCESSORS 4 SKIP_RETURN_CODE 77 ENVIRONMENT SHARC_CUDA_PATH=direct)
endif()
sharc_mp_test(mp.check.off.shm 60 4 ""
  bash ${CMAKE_CURRENT_SOURCE_DIR}/mismatch_test.sh ${SHARC_MP_RUN}
  $<TARGET_FILE:mismatch> shm off)
