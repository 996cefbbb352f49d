# Run after a pure target is built (see FleetlinkPurity.cmake): fails when one of
# its objects references a libwebsockets, libuv or OpenSSL symbol.
execute_process(COMMAND ${NM} -u --format=posix ${LIBRARY}
                OUTPUT_VARIABLE undefined RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIBRARY}")
endif()
string(REGEX MATCHALL "(^|\n)(lws_|uv_|SSL_|SSL_CTX_|X509|EVP_|OPENSSL_|ERR_|BIO_|CRYPTO_)[A-Za-z0-9_]*"
       impure "${undefined}")
if(impure)
  string(REPLACE "\n" " " impure "${impure}")
  message(FATAL_ERROR "${TARGET} is a pure target but references:${impure}")
endif()
