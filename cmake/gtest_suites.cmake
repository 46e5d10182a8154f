# SPDX-License-Identifier: Apache-2.0
# nvtcp_gtest_suites(BINARY SOURCES...): one CTest test per GoogleTest suite of BINARY, for the
# sanitizer trees.
#
# The Release tree registers every test case as a test of its own (gtest_discover_tests), so a
# failure names its case and a skip its reason. A sanitizer build pays for each process it
# starts: an ASan test binary takes about 0.2 s of CPU to start and exit before its first test
# (its 85 MB are mapped, its shadow memory set up, its heap checked for leaks at exit), against
# 0.01 s in Release, and it held ~600 one-case processes, two minutes of the machine. Here each
# suite runs in one process instead: GoogleTest still prints which case failed, and a suite is
# the unit whose cases share fixtures and helpers.
#
# The suites are read from the sources (TEST, TEST_F, TEST_P; a TEST_P suite also matches its
# instantiations, Prefix/Suite.Case/N). Whatever that reading misses still runs: PREFIX.unlisted
# runs every case that no suite's filter selected (normally none). A suite's COST is its number
# of cases, so ctest starts the long suites first and no core waits alone at the end.
#
# Cases skipped with GTEST_SKIP pass inside their suite here; the Release pass lists them with
# their reasons (scripts/ctest-with-skips.sh).
#
#   nvtcp_gtest_suites(BINARY <target> PREFIX <name> [SOURCES <files...>]
#                      [THREADED_SOURCES <files...>] [CASE_COST <n>] [TIMEOUT <s>])
#
# Each suite's test is named PREFIX.Suite (two binaries may hold suites of one name).
#
# The suites of THREADED_SOURCES carry the label `threaded` (make tsan-tests runs them), as does
# PREFIX.unlisted when every source is threaded. CASE_COST weighs a case (1 by default): an
# integration case takes ten times a unit case.
function(nvtcp_gtest_suites)
  cmake_parse_arguments(arg "" "BINARY;PREFIX;TIMEOUT;CASE_COST" "SOURCES;THREADED_SOURCES" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 600)
  endif()
  if(NOT arg_CASE_COST)
    set(arg_CASE_COST 1)
  endif()
  set(all_filters)
  set(suites)
  foreach(src IN LISTS arg_SOURCES arg_THREADED_SOURCES)
    file(READ ${src} text)
    string(REGEX MATCHALL "\nTEST(_F|_P)?\\([A-Za-z0-9_]+," cases "${text}")
    foreach(c IN LISTS cases)
      string(REGEX REPLACE "\nTEST(_F|_P)?\\(([A-Za-z0-9_]+)," "\\2" suite "${c}")
      if(NOT suite IN_LIST suites)
        list(APPEND suites ${suite})
        set(count_${suite} 0)
        set(threaded_${suite} OFF)
      endif()
      math(EXPR count_${suite} "${count_${suite}} + ${arg_CASE_COST}")
      if(src IN_LIST arg_THREADED_SOURCES)
        set(threaded_${suite} ON)
      endif()
    endforeach()
  endforeach()
  foreach(suite IN LISTS suites)
    set(filter "${suite}.*:*/${suite}.*")
    list(APPEND all_filters ${filter})
    set(name ${arg_PREFIX}.${suite})
    add_test(NAME ${name} COMMAND $<TARGET_FILE:${arg_BINARY}> --gtest_filter=${filter})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${arg_TIMEOUT} COST ${count_${suite}})
    if(threaded_${suite})
      set_tests_properties(${name} PROPERTIES LABELS threaded)
    endif()
  endforeach()
  list(JOIN all_filters ":" all_filters)
  set(name ${arg_PREFIX}.unlisted)
  add_test(NAME ${name} COMMAND $<TARGET_FILE:${arg_BINARY}> "--gtest_filter=-${all_filters}")
  set_tests_properties(${name} PROPERTIES TIMEOUT ${arg_TIMEOUT})
  if(NOT arg_SOURCES)
    set_tests_properties(${name} PROPERTIES LABELS threaded)
  endif()
endfunction()
