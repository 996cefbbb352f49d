# CPack post-build script (CPACK_POST_BUILD_SCRIPTS): completes the -dbgsym .ddeb
# packages that CPackDeb (CMake 3.25) writes, so that they pass lintian like the
# others. CPackDeb lists absolute staging paths in their md5sums and gives them no
# doc directory; each is unpacked, given correct md5sums and its doc directory
# (a link, as Debian's own -dbgsym packages have), and packed again under the
# same name.
# The .ddebs are written beside the .debs (CPACK_PACKAGE_FILES lists the .debs).
set(ddebs "")
foreach(package_file IN LISTS CPACK_PACKAGE_FILES)
  get_filename_component(dir "${package_file}" DIRECTORY)
  file(GLOB found "${dir}/*-dbgsym_*.ddeb")
  list(APPEND ddebs ${found})
endforeach()
list(REMOVE_DUPLICATES ddebs)
if(NOT ddebs)
  message(FATAL_ERROR "fix-dbgsym: no -dbgsym .ddeb beside ${CPACK_PACKAGE_FILES}")
endif()
foreach(ddeb IN LISTS ddebs)
  get_filename_component(dir "${ddeb}" DIRECTORY)
  set(work "${dir}/_fix-dbgsym")
  file(REMOVE_RECURSE "${work}")
  execute_process(COMMAND dpkg-deb -R "${ddeb}" "${work}" COMMAND_ERROR_IS_FATAL ANY)
  execute_process(COMMAND dpkg-deb -f "${ddeb}" Package OUTPUT_VARIABLE package
                  OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  # As dh_strip does: the doc directory is a link to the one of the package whose
  # debug info this is (on which the .ddeb depends, at the same version).
  string(REGEX REPLACE "-dbgsym$" "" main "${package}")
  file(MAKE_DIRECTORY "${work}/usr/share/doc")
  file(CREATE_LINK "${main}" "${work}/usr/share/doc/${package}" SYMBOLIC)
  # md5sums: every regular file under the package root, by path relative to it.
  file(GLOB_RECURSE files RELATIVE "${work}" "${work}/usr/*")
  list(SORT files)
  set(md5sums "")
  foreach(f IN LISTS files)
    if(IS_SYMLINK "${work}/${f}")
      continue()
    endif()
    file(MD5 "${work}/${f}" sum)
    string(APPEND md5sums "${sum}  ${f}\n")
  endforeach()
  file(WRITE "${work}/DEBIAN/md5sums" "${md5sums}")
  execute_process(COMMAND chmod -R u+rwX,go+rX,go-w "${work}/usr" COMMAND_ERROR_IS_FATAL ANY)
  execute_process(COMMAND chmod 0644 "${work}/DEBIAN/md5sums" "${work}/DEBIAN/control"
                  COMMAND_ERROR_IS_FATAL ANY)
  execute_process(COMMAND dpkg-deb --root-owner-group -Zxz -b "${work}" "${ddeb}"
                  OUTPUT_QUIET COMMAND_ERROR_IS_FATAL ANY)
  file(REMOVE_RECURSE "${work}")
endforeach()
