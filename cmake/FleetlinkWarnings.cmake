# Warnings are errors for everything the project compiles itself.
add_library(fleetlink_warnings INTERFACE)
target_compile_options(fleetlink_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Werror
  -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wnull-dereference -Wformat=2 -Wimplicit-fallthrough
  $<$<CXX_COMPILER_ID:GNU>:-Wno-missing-field-initializers>
  $<$<CXX_COMPILER_ID:Clang>:-Wno-missing-field-initializers>)
