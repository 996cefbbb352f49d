# FLEETLINK_SANITIZE=address,undefined builds everything with those sanitizers.
set(FLEETLINK_SANITIZE "" CACHE STRING "Comma-separated sanitizers (e.g. address,undefined)")
if(FLEETLINK_SANITIZE)
  add_compile_options(-fsanitize=${FLEETLINK_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${FLEETLINK_SANITIZE})
endif()
