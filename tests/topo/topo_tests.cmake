# Topology tests (label topo): test_topo reads the hwloc exports in xml/,
# and sharc_topo_test.sh runs the sharc-topo command (one CTest test per
# case). Included by tests/CMakeLists.txt after the unit tests.
#
#   ctest -L topo        or        ctest -R topo

target_compile_definitions(test_topo PRIVATE
  SHARC_TOPO_XML_DIR="${CMAKE_CURRENT_LIST_DIR}/xml")
set_property(TEST unit.test_topo APPEND PROPERTY LABELS topo)

foreach(case summary nics dot badargs missing garbage live job)
  add_test(NAME topo.cli.${case}
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sharc_topo_test.sh ${case}
            $<TARGET_FILE:sharc-topo> $<TARGET_FILE:sharcrun>
            ${CMAKE_CURRENT_LIST_DIR}/xml ${SHARC_HAVE_HWLOC})
  set_tests_properties(topo.cli.${case} PROPERTIES TIMEOUT 120 LABELS topo
                       SKIP_RETURN_CODE 77)
endforeach()
set_tests_properties(topo.cli.job PROPERTIES PROCESSORS 4
                     ENVIRONMENT "SHARC_TIMEOUT=60")
