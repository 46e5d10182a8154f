# SPDX-License-Identifier: Apache-2.0
# cmake -DBUILD_DIR=... -DTARGET=nvtcp_layering_<layer> -DGENERATOR=... -DCONFIG=... -DLAYER=<layer>
#       -DSEES=<layer>=<header>,... -DBLIND=<layer>=<header>,... -P check.cmake
#
# Builds the probe library of one layer, going on past errors (each probe is one file that
# includes one header, run through the preprocessor only), and checks every probe: those of
# layers it may see find their header and everything it includes, those of the others fail
# because the header is not found (not for some other reason, which would prove nothing about
# the include directories).
cmake_minimum_required(VERSION 3.25)

if(GENERATOR MATCHES "Ninja")
  set(keep_going -k 0)
else()
  set(keep_going -k)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --config ${CONFIG} --target ${TARGET} -- ${keep_going}
                OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)

string(REPLACE "," ";" sees "${SEES}")
string(REPLACE "," ";" blind "${BLIND}")
set(failures)
foreach(entry IN LISTS sees blind)
  string(REPLACE "=" ";" pair "${entry}")
  list(GET pair 0 other)
  list(GET pair 1 header)
  set(file "probe_${LAYER}_${other}.cpp")
  string(REPLACE "." "\\." file_re "${file}")
  string(REPLACE "." "\\." header_re "${header}")
  # gcc: "f.cpp:1:10: fatal error: a/b.hpp: No such file or directory"; clang: "'a/b.hpp' file not found".
  set(not_found "${file_re}:1:[0-9]+: fatal error: '?${header_re}'?:? (No such file or directory|file not found)")
  if(entry IN_LIST sees)
    # Its own error, one in a header it includes, or the build tool's word that its object failed.
    if(out MATCHES "${file_re}:[0-9]+:[0-9]+: (fatal )?error" OR out MATCHES "In file included from [^\n]*${file_re}"
       OR out MATCHES "FAILED: [^\n]*${file_re}\\.o" OR out MATCHES "${file_re}\\.o\\] Error")
      list(APPEND failures "${LAYER} may include ${header} (${other}), but it or a header it includes is not found")
    endif()
  elseif(NOT out MATCHES "${not_found}")
    list(APPEND failures "${LAYER} must not see ${other}, but ${file} did not fail with '${header}' not found")
  endif()
endforeach()

if(failures)
  string(REPLACE ";" "\n  " failures "${failures}")
  message(FATAL_ERROR "layering of ${LAYER}:\n  ${failures}\n\nbuild output (exit ${rc}):\n${out}")
endif()
string(REPLACE "," " " sees_list "${SEES}")
string(REGEX REPLACE "=[^ ]*" "" sees_list "${sees_list}")
string(REPLACE "," " " blind_list "${BLIND}")
string(REGEX REPLACE "=[^ ]*" "" blind_list "${blind_list}")
message(STATUS "${LAYER} sees: ${sees_list}; is blind to: ${blind_list}")
