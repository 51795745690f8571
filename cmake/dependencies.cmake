# Third-party libraries, all from Debian 12 packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
# Boost.Beast/Asio for the HTTP server: header-only, so the binary needs no Boost library at run time.
find_package(Boost 1.74 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
if(ORCHID_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(ORCHID_BENCH)
  find_package(benchmark REQUIRED)
endif()
# xgrammar's C++ core (structured outputs), built by scripts/build-xgrammar.sh into .deps/xgrammar; it installs
# no CMake package, so the imported target is declared here.
find_path(XGRAMMAR_INCLUDE_DIR xgrammar/xgrammar.h HINTS ${PROJECT_SOURCE_DIR}/.deps/xgrammar/include)
find_library(XGRAMMAR_LIBRARY NAMES libxgrammar.a xgrammar HINTS ${PROJECT_SOURCE_DIR}/.deps/xgrammar/lib)
if(NOT XGRAMMAR_INCLUDE_DIR OR NOT XGRAMMAR_LIBRARY)
  message(FATAL_ERROR "xgrammar not found: run scripts/setup.sh (it builds .deps/xgrammar)")
endif()
add_library(xgrammar::xgrammar STATIC IMPORTED)
set_target_properties(xgrammar::xgrammar PROPERTIES IMPORTED_LOCATION ${XGRAMMAR_LIBRARY}
                      INTERFACE_INCLUDE_DIRECTORIES ${XGRAMMAR_INCLUDE_DIR}
                      INTERFACE_SYSTEM_INCLUDE_DIRECTORIES ${XGRAMMAR_INCLUDE_DIR}
                      INTERFACE_COMPILE_DEFINITIONS "XGRAMMAR_ENABLE_CPPTRACE=0;XGRAMMAR_ENABLE_INTERNAL_CHECK=0")
