# Runs at install time (from cmake_install.cmake, through install(CODE) in
# packaging/CMakeLists.txt): installs the configs and systemd units, whose place and
# whose contents depend on the prefix the install is made to, which is only known
# now (`cmake --install build --prefix DIR`, CPack's /usr).
#
# The rule is GNUInstallDirs' for sysconfdir: the prefix /usr puts configs in /etc,
# every other prefix in PREFIX/etc; units go to PREFIX/lib/systemd/system (so
# /usr/lib/systemd/system for the packages). A directory given as an absolute path
# at configure time is used as given. DESTDIR is honoured by file(INSTALL).
#
# Input variables (set by the install(CODE) that includes this file):
#   FLEETLINK_KIND       conf | unit
#   FLEETLINK_TEMPLATES  files to instantiate (@VAR@ substituted, see below)
#   FLEETLINK_MODE       file permissions, e.g. OWNER_READ;OWNER_WRITE;GROUP_READ
#   FLEETLINK_SYSCONFDIR, FLEETLINK_UNITDIR, FLEETLINK_BINDIR, FLEETLINK_LIBDIR,
#   FLEETLINK_DATADIR    the configure-time directories (relative or absolute)
#   FLEETLINK_USER, FLEETLINK_STAGE_DIR

string(REGEX REPLACE "(.)/+$" "\\1" fleetlink_prefix "${CMAKE_INSTALL_PREFIX}")

function(fleetlink_full_dir out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "${fleetlink_prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

if(IS_ABSOLUTE "${FLEETLINK_SYSCONFDIR}")
  set(fleetlink_sysconf "${FLEETLINK_SYSCONFDIR}")
elseif(fleetlink_prefix STREQUAL "/usr")
  set(fleetlink_sysconf "/etc")
else()
  set(fleetlink_sysconf "${fleetlink_prefix}/${FLEETLINK_SYSCONFDIR}")
endif()

# The values the templates name (@FLEETLINK_...@), as seen from the installed tree.
set(FLEETLINK_CONFDIR "${fleetlink_sysconf}/fleetlink")
fleetlink_full_dir(FLEETLINK_BINDIR_FULL "${FLEETLINK_BINDIR}")
fleetlink_full_dir(FLEETLINK_DATADIR_FULL "${FLEETLINK_DATADIR}")
fleetlink_full_dir(fleetlink_libdir_full "${FLEETLINK_LIBDIR}")
set(FLEETLINK_PLUGINDIR_FULL "${fleetlink_libdir_full}/fleetlink/plugins")
fleetlink_full_dir(fleetlink_unitdir "${FLEETLINK_UNITDIR}")

if(FLEETLINK_KIND STREQUAL "conf")
  set(fleetlink_dest "${FLEETLINK_CONFDIR}")
else()
  set(fleetlink_dest "${fleetlink_unitdir}")
endif()

# Like install(FILES DESTINATION /absolute): refused when the caller forbids
# destinations outside the prefix (tests/integration/test_install_prefix.py does).
string(FIND "${fleetlink_dest}/" "${fleetlink_prefix}/" fleetlink_under_prefix)
if(CMAKE_ERROR_ON_ABSOLUTE_INSTALL_DESTINATION AND NOT fleetlink_under_prefix EQUAL 0)
  message(FATAL_ERROR "ABSOLUTE path INSTALL DESTINATION forbidden (by caller): ${fleetlink_dest}")
endif()

# Instantiated copies are staged per (prefix, DESTDIR): two installs of one build
# tree to different places at once must not see each other's files.
string(MD5 fleetlink_key "${fleetlink_prefix}|$ENV{DESTDIR}")
set(fleetlink_stage "${FLEETLINK_STAGE_DIR}/${fleetlink_key}")
set(fleetlink_staged "")
foreach(template IN LISTS FLEETLINK_TEMPLATES)
  get_filename_component(name "${template}" NAME)
  file(READ "${template}" text)
  string(CONFIGURE "${text}" text @ONLY)
  file(WRITE "${fleetlink_stage}/${name}" "${text}")
  list(APPEND fleetlink_staged "${fleetlink_stage}/${name}")
endforeach()
file(INSTALL DESTINATION "${fleetlink_dest}" TYPE FILE PERMISSIONS ${FLEETLINK_MODE}
     FILES ${fleetlink_staged})
