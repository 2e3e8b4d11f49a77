#!/usr/bin/env bash
# tools/gpu_deps.sh: gathers the header-only build dependencies -- Eigen 3, Catch2 2 and nlohmann-json 3,
# each with its CMake package files -- plus zlib's headers and static library, from this Debian
# machine into .device-deps/ (ignored by git), for a GPU machine that has CUDA, CMake and Ninja but
# not these packages. tools/gpu_check.sh points CMake at the folder.
#
#   bash tools/gpu_deps.sh            # writes .device-deps/ (about 12 MB)
#
# The layout mirrors /usr, because each package's CMake files find their headers relative to
# themselves (three folders up is the prefix):
#   .device-deps/include/{eigen3,catch2,nlohmann,zlib.h,zconf.h}
#   .device-deps/share/eigen3/cmake/           Eigen3Config.cmake ...
#   .device-deps/lib/cmake/Catch2/             Catch2Config.cmake, Catch.cmake, CatchAddTests.cmake ...
#   .device-deps/lib/libCatch2WithMain.a       named by Catch2's targets file (ringgrad does not link it)
#   .device-deps/share/cmake/nlohmann_json/    nlohmann_jsonConfig.cmake ...
#   .device-deps/lib/libz.a                    used only where the GPU machine lacks zlib.h
#   .device-deps/include/nccl.h                the CUDA toolkit's, where it has one: a GPU machine whose
#                                              NCCL is only a libnccl.so.2 (a Python wheel's) lacks it
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=.device-deps
need=(/usr/include/eigen3 /usr/share/eigen3/cmake /usr/include/catch2 /usr/lib/cmake/Catch2 /usr/lib/libCatch2WithMain.a
      /usr/include/nlohmann /usr/share/cmake/nlohmann_json /usr/include/zlib.h /usr/include/zconf.h
      /usr/lib/x86_64-linux-gnu/libz.a)
for p in "${need[@]}"; do
  [[ -e "$p" ]] || { echo "gpu_deps: missing $p (install libeigen3-dev catch2 nlohmann-json3-dev zlib1g-dev)" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out/include" "$out/share/eigen3" "$out/lib/cmake" "$out/share/cmake"
cp -a /usr/include/eigen3 /usr/include/catch2 /usr/include/nlohmann /usr/include/zlib.h /usr/include/zconf.h "$out/include/"
cp -a /usr/share/eigen3/cmake "$out/share/eigen3/"
cp -a /usr/lib/cmake/Catch2 "$out/lib/cmake/"
cp -a /usr/lib/libCatch2WithMain.a /usr/lib/x86_64-linux-gnu/libz.a "$out/lib/"
cp -a /usr/share/cmake/nlohmann_json "$out/share/cmake/"
if [[ -f /usr/local/cuda/include/nccl.h ]]; then cp -a /usr/local/cuda/include/nccl.h "$out/include/"; fi

echo "gpu_deps: wrote $out ($(du -sh "$out" | cut -f1)):"
for v in "Eigen $(grep -m1 'PACKAGE_VERSION "' "$out/share/eigen3/cmake/Eigen3ConfigVersion.cmake" | cut -d'"' -f2)" \
         "Catch2 $(grep -m1 'PACKAGE_VERSION "' "$out/lib/cmake/Catch2/Catch2ConfigVersion.cmake" | cut -d'"' -f2)" \
         "nlohmann_json $(grep -m1 'PACKAGE_VERSION "' "$out/share/cmake/nlohmann_json/nlohmann_jsonConfigVersion.cmake" | cut -d'"' -f2)"; do
  echo "  $v"
done
