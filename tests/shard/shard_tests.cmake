# The FSDP engine end to end: sharc-train jobs through sharcrun, compared
# by tests/shard/compare.py (tests/shard/shard_test.sh says what each
# checks). Label shard:   ctest -L shard
# Included by tests/CMakeLists.txt when the models are built. Budget: about
# 3 minutes on 2 cores in the plain build; the sanitizer build runs the
# parity checks with --quick (fewer world sizes and strategies).
set(SHARC_SHARD_SH ${CMAKE_CURRENT_LIST_DIR}/shard_test.sh)
set(quick)
if(SHARC_SANITIZE OR SHARC_TSAN)
  set(quick --quick)
endif()
foreach(check parity-cnn parity-gpt ckpt kill-save memory options hsdp-hosts
              trace)
  add_test(NAME shard.${check}
           COMMAND bash ${SHARC_SHARD_SH} ${PROJECT_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR} ${check} ${quick})
  set_tests_properties(shard.${check} PROPERTIES TIMEOUT 900 LABELS shard
                       PROCESSORS 4 SKIP_RETURN_CODE 77)
endforeach()
# GPU training against the host, and its stream timing (shard_test.sh
# device-*): named gpu.* so that CI's softcuda pass (and its jittered
# reruns) runs them, elsewhere without a GPU they skip. Both models run
# whole, also under the sanitizers (on softcuda under ASan: the GPT about
# 40 s, the CNN about 2 minutes, its convolutions on the host's threads);
# CI's jittered passes run them with SHARC_SHARD_QUICK=1. timing: 5 short
# jobs.
if(SHARC_HAVE_CUDA)
  foreach(m cnn gpt timing)
    add_test(NAME gpu.train.${m}
             COMMAND bash ${SHARC_SHARD_SH} ${PROJECT_BINARY_DIR}
                     ${PROJECT_SOURCE_DIR} device-${m})
    set_tests_properties(gpu.train.${m} PROPERTIES TIMEOUT 900
                         LABELS "shard;gpu" PROCESSORS 4 SKIP_RETURN_CODE 77)
  endforeach()
endif()
