# The launcher's own checks: plain shell ranks, no libsharc needed.
# Included by tests/mp/CMakeLists.txt.
add_test(NAME mp.sharcrun
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sharcrun_test.sh $<TARGET_FILE:sharcrun>)
set_tests_properties(mp.sharcrun PROPERTIES TIMEOUT 120 LABELS mp)
