# Several hosts on one machine: each host a network namespace, joined by a
# bridge in a namespace of its own (tests/mp/hosts_test.sh). Ranks of one
# host use shm, ranks of different hosts tcp. Needs root (else SKIP 77).
# Labels mp and hosts:   ctest -L hosts
# Included by tests/mp/CMakeLists.txt.
#
# Layouts (one letter per rank names its host): 2 x 2, 2 x 2 interleaved
# (abab: a host-aware ring must reorder the ranks), 2 x 3, 3 + 1 with rank 1
# alone (uneven and interleaved), 3 x 2, and 4 hosts of one rank.
# Each runs coll_check (every collective, type, op, in-place and count; the
# large count for a representative subset, fewer with --quick in sanitizer
# builds) with the cost model (auto), each flat algorithm family forced
# (ring, tree) and the hierarchical one (hier); sanitizer builds force ring
# and tree on aabb and abab only. Budget: these 28 tests and
# the 8 mp.hsdp ones take about 90 s on 2 cores in the plain build and 80 s
# in the sanitizer build (with --quick). Every job runs under an inner
# `timeout` well below the CTest TIMEOUT, so the script, not CTest, stops
# the ranks and removes the namespaces.

set(SHARC_HOSTS_SH ${CMAKE_CURRENT_SOURCE_DIR}/hosts_test.sh)

# sharc_hosts_test(NAME MAP ENV COMMAND...): one job on the hosts of MAP.
function(sharc_hosts_test name map env)
  string(LENGTH ${map} nranks)
  add_test(NAME ${name}
           COMMAND bash ${SHARC_HOSTS_SH} --timeout 240 ${map} ${ARGN})
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 LABELS "mp;hosts"
                       PROCESSORS ${nranks} SKIP_RETURN_CODE 77
                       ENVIRONMENT "SHARC_TIMEOUT=60;${env}")
endfunction()

if(SHARC_TEST_FULL)
  set(hosts_sweep) # coll_check's default: the representative large subset
else()
  set(hosts_sweep --quick)
endif()
# Sanitizer builds force the flat families (ring, tree) on two layouts only
# (2 x 2 and interleaved): their code paths are the one-host ones the rest
# of the suite runs under the sanitizers too, and CI time is short.
foreach(map aabb abab aaabbb abaa aabbcc abcd)
  foreach(algo auto ring tree hier)
    if(NOT SHARC_TEST_FULL AND (algo STREQUAL ring OR algo STREQUAL tree)
       AND NOT (map STREQUAL aabb OR map STREQUAL abab))
      continue()
    endif()
    sharc_hosts_test(mp.hosts.${map}.${algo} ${map} "SHARC_ALGO=${algo}"
                     $<TARGET_FILE:coll_check> ${hosts_sweep})
  endforeach()
endforeach()

# sharc_comm_split_hsdp: one host (sharcrun, 1..8 ranks) and host layouts,
# including 3 + 1 where one shard group per host must be refused and 2 x 2
# interleaved (abab) where the per-host groups are not consecutive blocks.
add_executable(hsdp_check hsdp_check.c)
target_include_directories(hsdp_check PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(hsdp_check PRIVATE sharc)
foreach(n 1 2 3 4 5 6 7 8)
  sharc_mp_test(mp.hsdp.n${n} 120 ${n} "SHARC_TIMEOUT=30"
    ${SHARC_MP_RUN} -n ${n} --timeout 100 $<TARGET_FILE:hsdp_check>)
endforeach()
foreach(map aabb aaabbb abaa abab)
  sharc_hosts_test(mp.hosts.${map}.hsdp ${map} "" $<TARGET_FILE:hsdp_check>)
endforeach()

# Device memory across hosts (label gpu too): the coll_check sweep on
# device buffers over 2 hosts x 2 ranks and interleaved, 1 + 1 and 2 + 1
# ranks, where the default
# SHARC_CUDA_PATH=auto takes the staged path (ranks on more than one host;
# the device data staged through pinned host memory and carried by tcp
# between hosts, shm within one). Skips (77) without root or a CUDA device.
if(SHARC_HAVE_CUDA)
  foreach(map aabb abab)
    sharc_hosts_test(gpu.hosts.${map} ${map} ""
                     $<TARGET_FILE:coll_check> --mem cuda --quick)
    set_property(TEST gpu.hosts.${map} APPEND PROPERTY LABELS gpu)
  endforeach()
  # one rank per host at 2 ranks, with the larger sweep (every collective
  # at 1048579 elements in the representative dtypes), and 2 + 1 at 3 ranks
  sharc_hosts_test(gpu.hosts.ab ab "" $<TARGET_FILE:coll_check> --mem cuda
                   --full)
  sharc_hosts_test(gpu.hosts.aab aab "" $<TARGET_FILE:coll_check> --mem cuda
                   --quick)
  set_property(TEST gpu.hosts.ab gpu.hosts.aab APPEND PROPERTY LABELS gpu)
  # across hosts the staged path reduces on the GPU by default; the host
  # reduction (SHARC_CUDA_STAGED_REDUCE=host) as well
  sharc_hosts_test(gpu.hosts.aabb.hostred aabb "SHARC_CUDA_STAGED_REDUCE=host"
                   $<TARGET_FILE:coll_check> --mem cuda --quick)
  set_property(TEST gpu.hosts.aabb.hostred APPEND PROPERTY LABELS gpu)
endif()

# Link delay (hosts_test.sh --delay, for kernels without sch_netem): the
# wire_delay helper that holds the packets between hosts, and a test that
# the delay is there (round trips of at least 2 x the delay), combines with
# a tbf rate, is absent without --delay, and leaves nothing behind, also
# when the script is killed. Skips (77) without root or /dev/net/tun.
add_executable(wire_delay wire_delay.c)
add_test(NAME mp.hosts.delay
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/delay_test.sh
                 $<TARGET_FILE:wire_delay>)
set_tests_properties(mp.hosts.delay PROPERTIES TIMEOUT 120 LABELS "mp;hosts"
                     PROCESSORS 2 SKIP_RETURN_CODE 77)
