#!/bin/sh
# examples/consumer/without_gpu_stack.sh COMMAND [ARG...]: runs COMMAND as on a machine without the
# CUDA toolkit, NCCL and Gloo, which this machine has. consumer_find_package (run.cmake) builds and
# runs the CPU-only consumer this way: the installed ringgrad must not need any of them.
#
# How: a private mount namespace (unshare; needs root: without it, or where the toolkit lives in /usr
# itself and cannot be hidden, it exits 77, which CTest counts as skipped), in which each folder that
# holds a piece of them is covered by a view of itself without those pieces. A view is a tmpfs with
# the folder's other entries bind-mounted into it from a second mount of the original (bind mounts,
# not symbolic links: a path such as /usr/lib/gcc/.../../../../include must climb back through the
# view, as GCC's include paths do). Symbolic links are copied as they are. Nothing outside the
# namespace changes, and it ends with COMMAND. Hidden:
#   - the CUDA toolkit's folders (/usr/local/cuda*, and nvvm, targets beside them), and in
#     /usr/local/{bin,include,lib,lib64} every entry whose name the toolkit also has there (some
#     installers copy the toolkit into /usr/local itself); a toolkit elsewhere (the folder above
#     nvcc's bin/, or CUDA_PATH / CUDA_HOME / CUDAToolkit_ROOT) is covered by an empty folder;
#   - NCCL and Gloo (libnccl*, nccl*.h, libgloo*, gloo/, Gloo/) in /usr/lib, /usr/include, /usr/share/cmake
#     and /usr/lib/<multiarch>.
set -eu
if [ "$#" -eq 0 ]; then
  echo "usage: without_gpu_stack.sh COMMAND [ARG...]" >&2
  exit 2
fi
if [ -z "${RINGGRAD_WITHOUT_GPU_STACK:-}" ]; then
  if [ "$(id -u)" -ne 0 ] || ! unshare --mount true 2>/dev/null; then
    echo "without_gpu_stack.sh: cannot hide CUDA, NCCL and Gloo here (needs root and unshare --mount)" >&2
    exit 77
  fi
  # The folder the namespace mounts its views on; made and removed out here, where it is empty.
  hide_root="$(mktemp -d /tmp/without_gpu_stack.XXXXXX)"
  status=0
  unshare --mount --propagation private env RINGGRAD_WITHOUT_GPU_STACK="$hide_root" sh "$0" "$@" || status=$?
  rmdir "$hide_root"
  exit "$status"
fi

hide_root="$RINGGRAD_WITHOUT_GPU_STACK"
mount -t tmpfs tmpfs "$hide_root"
# The names the toolkit has, read before anything is hidden (hiding /usr/local hides the toolkit too).
toolkit="$(readlink -f /usr/local/cuda 2>/dev/null || true)"
toolkit_names="$hide_root/toolkit_names"
: >"$toolkit_names"
for sub in bin include lib lib64 nvvm targets; do
  if [ -n "$toolkit" ] && [ -d "$toolkit/$sub" ]; then ls -A "$toolkit/$sub" >>"$toolkit_names"; fi
done

# is_hidden FOLDER NAME: whether FOLDER/NAME is a piece of CUDA, NCCL or Gloo.
is_hidden() {
  case "$2" in
    libnccl*|nccl*.h|libgloo*|gloo|Gloo) return 0 ;;
  esac
  case "$1" in
    /usr/local)
      case "$2" in cuda|cuda-*|nvvm|targets) return 0 ;; esac ;;
    /usr/local/bin|/usr/local/include|/usr/local/lib|/usr/local/lib64)
      grep -qxF -- "$2" "$toolkit_names" && return 0 ;;
  esac
  return 1
}

# A toolkit outside /usr/local: the folder above nvcc's bin/, and what the usual variables name.
nvcc_path="$(command -v nvcc 2>/dev/null || true)"
nvcc_root=""
if [ -n "$nvcc_path" ]; then nvcc_root="$(dirname "$(dirname "$(readlink -f "$nvcc_path")")")"; fi
for root in "$nvcc_root" "${CUDA_PATH:-}" "${CUDA_HOME:-}" "${CUDAToolkit_ROOT:-}"; do
  [ -n "$root" ] && [ -d "$root" ] || continue
  root="$(readlink -f "$root")"
  case "$root" in
    /usr/local|/usr/local/cuda*) ;;  # the folders below handle these
    /usr|/)
      echo "without_gpu_stack.sh: the CUDA toolkit is installed in $root itself, which cannot be hidden" >&2
      exit 77 ;;
    *) mount -t tmpfs tmpfs "$root"
       echo "without_gpu_stack.sh: hid $root" >&2 ;;
  esac
done

count=0
for folder in /usr/local /usr/local/bin /usr/local/include /usr/local/lib /usr/local/lib64 /usr/lib /usr/include \
              /usr/share/cmake "/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"; do
  [ -d "$folder" ] || continue
  found=0
  for entry in "$folder"/* "$folder"/.[!.]*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    if is_hidden "$folder" "$(basename "$entry")"; then found=1; break; fi
  done
  [ "$found" -eq 1 ] || continue
  count=$((count + 1))
  original="$hide_root/original$count"
  view="$hide_root/view$count"
  mkdir "$original" "$view"
  mount --rbind "$folder" "$original"
  hidden_names=""
  for entry in "$original"/* "$original"/.[!.]*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    name="$(basename "$entry")"
    if is_hidden "$folder" "$name"; then
      hidden_names="$hidden_names $name"
    elif [ -L "$entry" ]; then
      cp -P "$entry" "$view/$name"
    else
      if [ -d "$entry" ]; then mkdir "$view/$name"; else : >"$view/$name"; fi
      mount --rbind "$entry" "$view/$name"
    fi
  done
  mount --rbind "$view" "$folder"
  echo "without_gpu_stack.sh: hid from $folder:$hidden_names" | cut -c1-300 >&2
done
exec "$@"
