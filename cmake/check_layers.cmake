# SPDX-License-Identifier: Apache-2.0
# Fails the build when a file includes a layer it must not depend on.
# Dependencies point one way (docs/architecture.md, "Layers"):
#   common, config  <-  proxy/io  <-  proxy/tunnel  <-  proxy/local, proxy/transport/{tcp,rdma}
#   <-  proxy/runtime (assembles the process)  <-  proxy/main.cc
# proxy/admin reads only the description structs the data path fills
# (tunnel/tunnel_info.h, local/stream_info.h).
# Run as: cmake -DROOT=<source dir> -P check_layers.cmake
cmake_minimum_required(VERSION 3.22)

function(allowed_prefixes file out)
  if(file MATCHES "^proxy/io/")
    set(allowed "proxy/io/")
  elseif(file MATCHES "^proxy/tunnel/")
    set(allowed "proxy/io/;proxy/tunnel/")
  elseif(file MATCHES "^proxy/transport/tcp/")
    set(allowed "proxy/io/;proxy/tunnel/;proxy/transport/tcp/")
  elseif(file MATCHES "^proxy/transport/rdma/")
    set(allowed "proxy/io/;proxy/tunnel/;proxy/transport/rdma/")
  elseif(file MATCHES "^proxy/local/")
    set(allowed "proxy/io/;proxy/tunnel/;proxy/local/")
  elseif(file MATCHES "^proxy/admin/")
    set(allowed "proxy/admin/;proxy/tunnel/tunnel_info.h;proxy/local/stream_info.h")
  elseif(file MATCHES "^(common|config)/")
    set(allowed "NONE")
  else()
    set(allowed "ANY")
  endif()
  set(${out} "${allowed}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE sources RELATIVE "${ROOT}" "${ROOT}/proxy/*.h" "${ROOT}/proxy/*.cc"
     "${ROOT}/common/*.h" "${ROOT}/common/*.cc" "${ROOT}/config/*.h" "${ROOT}/config/*.cc")
set(violations "")
foreach(file IN LISTS sources)
  allowed_prefixes("${file}" allowed)
  if(allowed STREQUAL "ANY")
    continue()
  endif()
  file(STRINGS "${ROOT}/${file}" includes REGEX "^#include \"proxy/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" target "${line}")
    set(ok FALSE)
    if(NOT allowed STREQUAL "NONE")
      foreach(prefix IN LISTS allowed)
        string(FIND "${target}" "${prefix}" at)
        if(at EQUAL 0)
          set(ok TRUE)
        endif()
      endforeach()
    endif()
    if(NOT ok)
      string(APPEND violations "  ${file} includes ${target}\n")
    endif()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "wrong-way includes (see cmake/check_layers.cmake for the layers):\n${violations}")
endif()
