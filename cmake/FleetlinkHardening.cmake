# Hardening for what ships: the agent runs as root on every rig, the broker faces the
# network. The same flags Debian's dpkg-buildflags gives a package built with
# hardening=+all (PIE, BIND_NOW): stack protector, fortified libc calls, read-only
# relocations resolved at start-up.
#
# Left out where they would change what is being tested rather than harden it:
#  - sanitizer builds (FLEETLINK_SANITIZE): ASan replaces the libc functions that
#    _FORTIFY_SOURCE wraps, and reports the same bugs better;
#  - fuzz builds (FLEETLINK_BUILD_FUZZ): libFuzzer instruments them itself;
#  - _FORTIFY_SOURCE in unoptimised (Debug) builds: glibc needs -O for it, and warns
#    otherwise (an error under -Werror).
option(FLEETLINK_HARDENING "Build with hardening flags (fortify, stack protector, RELRO, BIND_NOW, PIE)" ON)

include(CheckPIESupported)
check_pie_supported(LANGUAGES C CXX)  # CMAKE_POSITION_INDEPENDENT_CODE then also links with -pie

if(FLEETLINK_HARDENING AND NOT FLEETLINK_SANITIZE AND NOT FLEETLINK_BUILD_FUZZ)
  add_compile_options(
    -fstack-protector-strong
    # Replace whatever level the environment's CFLAGS chose, so the level is this one.
    "$<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-U_FORTIFY_SOURCE;-D_FORTIFY_SOURCE=2>")
  add_link_options(-Wl,-z,relro -Wl,-z,now)
  set(FLEETLINK_HARDENING_ACTIVE ON)
else()
  set(FLEETLINK_HARDENING_ACTIVE OFF)
endif()
