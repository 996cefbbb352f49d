# FLEETLINK_SANITIZE=address,undefined builds everything with those sanitizers;
# FLEETLINK_SANITIZE=thread with ThreadSanitizer (the unit tests' threads: the
# SQLite writer and WAL checkpointer, the agent's runners, the SDK's session;
# scripts/test.sh runs both). TSan cannot be combined with ASan.
set(FLEETLINK_SANITIZE "" CACHE STRING "Comma-separated sanitizers (e.g. address,undefined, or thread)")
if(FLEETLINK_SANITIZE)
  if(FLEETLINK_SANITIZE MATCHES "thread" AND FLEETLINK_SANITIZE MATCHES "address")
    message(FATAL_ERROR "FLEETLINK_SANITIZE: thread and address cannot be combined (two builds)")
  endif()
  add_compile_options(-fsanitize=${FLEETLINK_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${FLEETLINK_SANITIZE})
endif()
