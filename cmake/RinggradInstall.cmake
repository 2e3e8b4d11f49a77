# cmake/RinggradInstall.cmake: `cmake --install` rules, so another project can find_package(ringgrad).
#
# Installed layout (prefix/...):
#   include/ringgrad/ringgrad.h                   the generated umbrella header: #include <ringgrad/ringgrad.h>
#   include/ringgrad/core/..., kernels/*.h        the public headers, laid out as in the source tree:
#                                                 they include each other as <ringgrad/core/tensor.h>
#   lib/libringgrad.a                             the core: ringgrad::ringgrad (needs no CUDA, NCCL or Gloo)
#   lib/libringgrad_cuda.a, _nccl.a, _gloo.a      the optional parts this build has: ringgrad::cuda, ::nccl, ::gloo
#   lib/cmake/ringgrad/ringgrad-config.cmake      find_package(ringgrad [COMPONENTS cuda nccl gloo]) reads this
#                     ringgrad-config-version.cmake
#                     ringgrad-targets*.cmake          the core's imported targets, always loaded
#                     ringgrad-<part>-targets*.cmake   a part's, loaded when its component is asked for
#
# Components, not one library that needs everything: a CPU-only program must configure, link and run
# on a machine without the CUDA toolkit, NCCL or Gloo, and a GPU program says what it needs, once, in
# find_package, where a missing piece is a configure-time error instead of a run-time surprise.
# (The other way, parts as shared objects dlopen()ed on first use, would also spare CPU programs, but
# it moves "is CUDA there?" to run time and makes every build ship shared libraries.)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(RINGGRAD_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ringgrad)
set(RINGGRAD_INSTALL_HEADERDIR ${CMAKE_INSTALL_INCLUDEDIR}/ringgrad)

install(TARGETS ringgrad ringgrad_linked EXPORT ringgrad-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Each part in an export set of its own, so that loading the core's targets never names CUDA or Gloo.
set(RINGGRAD_CONFIG_PARTS)
foreach(part cuda nccl gloo)
  if(TARGET ringgrad_${part})
    install(TARGETS ringgrad_${part} ringgrad_${part}_linked EXPORT ringgrad-${part}-targets
      ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
    install(EXPORT ringgrad-${part}-targets
      NAMESPACE ringgrad::
      FILE ringgrad-${part}-targets.cmake
      DESTINATION ${RINGGRAD_INSTALL_CMAKEDIR})
    list(APPEND RINGGRAD_CONFIG_PARTS ${part})
  endif()
endforeach()

# The public headers (cmake/RinggradHeaders.cmake decides which), under include/ringgrad/ as in the
# build tree's include root, so <ringgrad/core/tensor.h> means the same file in both.
foreach(header IN LISTS RINGGRAD_PUBLIC_HEADERS)
  get_filename_component(header_dir ${header} DIRECTORY)
  install(FILES ${header} DESTINATION ${RINGGRAD_INSTALL_HEADERDIR}/${header_dir})
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/include/ringgrad/ringgrad.h DESTINATION ${RINGGRAD_INSTALL_HEADERDIR})
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/ringgrad)

# A sanitized static library calls into the sanitizer runtime, so whatever links it must link
# that runtime too. (In the build tree add_link_options() already covers every target.)
if(RINGGRAD_SANITIZE)
  target_link_options(ringgrad INTERFACE $<INSTALL_INTERFACE:-fsanitize=${RINGGRAD_SANITIZE}>)
endif()

install(EXPORT ringgrad-targets
  NAMESPACE ringgrad::
  FILE ringgrad-targets.cmake
  DESTINATION ${RINGGRAD_INSTALL_CMAKEDIR})

# What ringgrad-config.cmake must find before it loads the targets: a static library carries its
# PRIVATE link dependencies along as $<LINK_ONLY:...> (the final link needs them), and the parts are
# always static. Eigen never appears: it is header-only and linked as $<BUILD_INTERFACE:...>. The
# config reads RINGGRAD_CONFIG_PARTS, and NCCL_LIBRARY (the nccl part links NCCL by that path).

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/ringgrad-config.cmake.in
  ${PROJECT_BINARY_DIR}/ringgrad-config.cmake
  INSTALL_DESTINATION ${RINGGRAD_INSTALL_CMAKEDIR})
# SameMajorVersion: find_package(ringgrad 0.1) accepts any installed 0.x from 0.1 on, never 1.x.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/ringgrad-config-version.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/ringgrad-config.cmake
  ${PROJECT_BINARY_DIR}/ringgrad-config-version.cmake
  DESTINATION ${RINGGRAD_INSTALL_CMAKEDIR})
