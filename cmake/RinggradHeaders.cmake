# cmake/RinggradHeaders.cmake: which headers are public, and the include root they are reached by.
#
# Public headers are included as <ringgrad/core/tensor.h> everywhere: in the library itself, in the
# tests and programs, in a project that adds ringgrad with add_subdirectory, and once installed. In
# the build tree that root is ${PROJECT_BINARY_DIR}/include, where configure links each public
# header under ringgrad/; it is the only include directory the library exports, so no private
# header (kernels/cpu/, kernels/cuda/, core/ops/op_utils.h) is reachable from outside. The
# library's own sources, the tests and the kernel microbenchmarks reach private headers through
# the source root, which they add PRIVATE-ly.
#
# Sets RINGGRAD_PUBLIC_HEADERS: paths relative to the source root (cmake/RinggradInstall.cmake
# installs the same list).
set(RINGGRAD_INCLUDE_ROOT ${PROJECT_BINARY_DIR}/include)

# Everything under core/ and nn/, the headers at the top of parallel/, and the backend interface at
# the top of kernels/ -- less the private ones.
file(GLOB_RECURSE RINGGRAD_PUBLIC_HEADERS RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/core/*.h ${PROJECT_SOURCE_DIR}/nn/*.h)
file(GLOB RINGGRAD_TOP_HEADERS RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/parallel/*.h ${PROJECT_SOURCE_DIR}/kernels/*.h)
list(APPEND RINGGRAD_PUBLIC_HEADERS ${RINGGRAD_TOP_HEADERS})
list(FILTER RINGGRAD_PUBLIC_HEADERS EXCLUDE REGEX "^core/ops/")  # the op files' private helpers
set(RINGGRAD_PRIVATE_HEADERS
  core/base/cuda_check.h       # needs the CUDA toolkit's headers, which a user need not have
  parallel/store_protocol.h    # the store's wire format, shared by its server and client only
  parallel/store_server.h      # the store's server, which only the client starts
  parallel/socket.h            # TCP with deadlines, shared by the store, rendezvous and the ring
  parallel/collective_args.h   # the backends' shared argument checks
  parallel/collective_queue.h) # the backends' shared communication thread
list(REMOVE_ITEM RINGGRAD_PUBLIC_HEADERS ${RINGGRAD_PRIVATE_HEADERS})
list(SORT RINGGRAD_PUBLIC_HEADERS)

# The links, made afresh at each configure (a header removed from the tree loses its link).
file(REMOVE_RECURSE ${RINGGRAD_INCLUDE_ROOT}/ringgrad/core ${RINGGRAD_INCLUDE_ROOT}/ringgrad/kernels
  ${RINGGRAD_INCLUDE_ROOT}/ringgrad/nn ${RINGGRAD_INCLUDE_ROOT}/ringgrad/parallel)
foreach(header IN LISTS RINGGRAD_PUBLIC_HEADERS)
  get_filename_component(header_dir ${RINGGRAD_INCLUDE_ROOT}/ringgrad/${header} DIRECTORY)
  file(MAKE_DIRECTORY ${header_dir})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${header} ${RINGGRAD_INCLUDE_ROOT}/ringgrad/${header} SYMBOLIC)
endforeach()
