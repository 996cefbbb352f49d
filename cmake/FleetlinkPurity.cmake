# fleetlink_require_pure(<target>): the target is pure logic. It must not link
# libwebsockets, libuv or OpenSSL, directly or through what it links, and none
# of its objects may reference their symbols. Either is a build error:
#  - at configure time, once every target is defined, its link closure is walked;
#  - after each build of the library, `nm -u` lists what its objects reference
#    (catches a stray #include <libwebsockets.h> whose call would link through
#    some other target).
set(FLEETLINK_IMPURE_TARGETS websockets websockets_shared PkgConfig::LIBUV OpenSSL::SSL OpenSSL::Crypto)
set(FLEETLINK_PURITY_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/FleetlinkPurityCheck.cmake)

function(_fleetlink_link_closure item out_var)
  set(seen ${${out_var}})
  string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
  string(REGEX REPLACE "^\\$<BUILD_INTERFACE:(.*)>$" "\\1" item "${item}")
  if(item IN_LIST seen OR item MATCHES "^\\$<")
    return()
  endif()
  list(APPEND seen ${item})
  if(TARGET ${item})
    get_target_property(aliased ${item} ALIASED_TARGET)
    if(aliased)
      list(APPEND seen ${aliased})
      set(item ${aliased})
    endif()
    get_target_property(deps ${item} INTERFACE_LINK_LIBRARIES)
    if(deps)
      foreach(d IN LISTS deps)
        _fleetlink_link_closure("${d}" seen)
      endforeach()
    endif()
  endif()
  set(${out_var} ${seen} PARENT_SCOPE)
endfunction()

function(_fleetlink_check_pure_links target)
  get_target_property(direct ${target} LINK_LIBRARIES)
  set(closure "")
  if(direct)
    foreach(d IN LISTS direct)
      _fleetlink_link_closure("${d}" closure)
    endforeach()
  endif()
  foreach(bad IN LISTS FLEETLINK_IMPURE_TARGETS)
    if(bad IN_LIST closure)
      message(FATAL_ERROR "${target} is a pure target (no libwebsockets, libuv or OpenSSL) "
                          "but links ${bad}: move the code that needs it out of the target")
    endif()
  endforeach()
endfunction()

function(fleetlink_require_pure target)
  cmake_language(EVAL CODE
    "cmake_language(DEFER DIRECTORY \"${CMAKE_SOURCE_DIR}\" CALL _fleetlink_check_pure_links [[${target}]])")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DLIBRARY=$<TARGET_FILE:${target}> -DNM=${CMAKE_NM} -DTARGET=${target}
            -P ${FLEETLINK_PURITY_SCRIPT}
    VERBATIM)
endfunction()
