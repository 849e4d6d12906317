#!/usr/bin/env bash
# Builds the network-boot artefacts of the QEMU test machines and prints the folder holding them:
#
#   vmlinuz             Debian's cloud kernel (package linux-image-cloud-amd64, or
#                       METAL_KERNEL_PACKAGE), taken from the .deb with apt-get download + dpkg-deb
#   initramfs.cpio.gz   busybox-static, hack/vm/init as /init, the udhcpc hook, the ACPI power
#                       button handler, and the kernel modules the VM needs with their
#                       dependencies (loaded by /init with insmod in the order of
#                       /etc/metal/modules)
#   manifest.txt        kernel package and version, module list, sizes
#
# The folder is ${METAL_CACHE:-$HOME/.cache/metal-operator-ts}/vm/<key>, where <key> covers the
# kernel package version, the busybox version and the content of this script and hack/vm/, so
# a change to any of them builds a new folder and an unchanged input reuses the old one.
# Needs the packages of hack/install-packages.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VM_SRC="$HERE/vm"
CACHE="${METAL_CACHE:-$HOME/.cache/metal-operator-ts}"
KERNEL_META="${METAL_KERNEL_PACKAGE:-linux-image-cloud-amd64}"
# Built-in or module; af_packet is what udhcpc needs (raw sockets), button + evdev make the ACPI
# power button visible to acpid, virtio_blk shows the VM's disk to the probe.
WANTED_MODULES=(virtio_pci virtio_net virtio_blk af_packet button evdev)

log() { echo "[build-vm-artefacts] $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

for tool in apt-get apt-cache dpkg-deb dpkg-query cpio gzip depmod sha256sum; do
  command -v "$tool" >/dev/null || die "$tool not found; run hack/install-packages.sh"
done
[[ "$(dpkg-query -W -f='${Status}' busybox-static 2>/dev/null)" == "install ok installed" ]] ||
  die "busybox-static is not installed (the initramfs needs a statically linked busybox); run hack/install-packages.sh"

# The meta package names the versioned image package; its version makes the cache key.
kernel_pkg=$(apt-cache depends "$KERNEL_META" 2>/dev/null |
  sed -n 's/^ *Depends: \(linux-image-[^ ]*\)$/\1/p' | head -n 1)
[[ -n "$kernel_pkg" ]] || kernel_pkg="$KERNEL_META"
kernel_ver=$(apt-cache policy "$kernel_pkg" | sed -n 's/^ *Candidate: //p')
[[ -n "$kernel_ver" && "$kernel_ver" != "(none)" ]] ||
  die "no candidate version for $kernel_pkg (is the apt package list there? apt-get update)"
busybox_ver=$(dpkg-query -W -f='${Version}' busybox-static)

inputs_hash=$(
  {
    for f in "$HERE/build-vm-artefacts.sh" $(find "$VM_SRC" -type f | LC_ALL=C sort); do
      echo "== ${f#"$HERE"/}"
      cat "$f"
    done
    echo "$kernel_pkg $kernel_ver busybox $busybox_ver"
  } | sha256sum | cut -c1-12
)
key="${kernel_pkg#linux-image-}_${kernel_ver}_bb${busybox_ver}_${inputs_hash}"
key=${key//[^A-Za-z0-9._-]/_}
OUT="$CACHE/vm/$key"

if [[ -f "$OUT/.complete" ]]; then
  touch "$OUT/.complete" # last use, for pruning below
  log "reusing $OUT"
  echo "$OUT"
  exit 0
fi

mkdir -p "$CACHE/vm"
WORK=$(mktemp -d "$CACHE/vm/.build-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
started=$(date +%s)

log "kernel $kernel_pkg $kernel_ver"
mkdir -p "$WORK/deb" "$WORK/kernel"
# As root apt drops privileges to _apt for downloads, and _apt cannot enter a cache under $HOME.
apt_opts=()
[[ $(id -u) -eq 0 ]] && apt_opts=(-o APT::Sandbox::User=root)
(cd "$WORK/deb" && apt-get download -q "${apt_opts[@]}" "$kernel_pkg=$kernel_ver" >&2) ||
  die "apt-get download $kernel_pkg=$kernel_ver failed"
dpkg-deb -x "$WORK"/deb/*.deb "$WORK/kernel"
vmlinuz=$(find "$WORK/kernel/boot" -name 'vmlinuz-*' | head -n 1)
[[ -n "$vmlinuz" ]] || die "no vmlinuz in $kernel_pkg"
kver=${vmlinuz##*/vmlinuz-}
moddir="$WORK/kernel/lib/modules/$kver"
[[ -d "$moddir" ]] || die "no modules for $kver in $kernel_pkg"
# Packages ship modules.builtin but not modules.dep (postinst runs depmod); make it here.
[[ -f "$moddir/modules.dep" ]] || depmod -b "$WORK/kernel" "$kver"

norm() { local n="${1##*/}"; n="${n%%.ko*}"; echo "${n//-/_}"; }

declare -A builtin=()
while read -r path; do builtin[$(norm "$path")]=1; done <"$moddir/modules.builtin"
declare -A dep_line=()
while IFS= read -r line; do
  path=${line%%:*}
  dep_line[$(norm "$path")]="$line"
done <"$moddir/modules.dep"

declare -A picked=()
ordered=()   # module file paths, dependencies first
builtins=()
add_module() {
  local name; name=$(norm "$1")
  [[ -n "${picked[$name]:-}" ]] && return 0
  if [[ -n "${builtin[$name]:-}" ]]; then
    picked[$name]=builtin
    builtins+=("$name")
    return 0
  fi
  local line="${dep_line[$name]:-}"
  [[ -n "$line" ]] || die "kernel module $name is neither built in nor in modules.dep of $kver"
  local path=${line%%:*} deps=${line#*:} i
  local -a deps_arr
  read -r -a deps_arr <<<"$deps"
  # modules.dep lists every transitive dependency, the ones needed first at the end.
  for ((i = ${#deps_arr[@]} - 1; i >= 0; i--)); do add_module "${deps_arr[$i]}"; done
  picked[$name]=module
  ordered+=("$path")
}
for m in "${WANTED_MODULES[@]}"; do add_module "$m"; done

root="$WORK/root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,run,tmp,etc/udhcpc,etc/metal,etc/acpi/PWRF,lib/modules,var/run}
cp /bin/busybox "$root/bin/busybox"
while read -r applet; do
  [[ "$applet" == bin/busybox ]] && continue
  [[ -e "$root/$applet" ]] || ln -s /bin/busybox "$root/$applet"
done < <(/bin/busybox --list-full)
[[ -e "$root/bin/sh" ]] || ln -s /bin/busybox "$root/bin/sh"
install -m 0755 "$VM_SRC/init" "$root/init"
install -m 0755 "$VM_SRC/udhcpc.script" "$root/etc/udhcpc/default.script"
install -m 0755 "$VM_SRC/power-button" "$root/etc/acpi/PWRF/00000080"
: >"$root/etc/metal/modules"
for path in "${ordered[@]}"; do
  name=$(norm "$path")
  case "$path" in
    *.ko) cp "$moddir/$path" "$root/lib/modules/$name.ko" ;;
    *.ko.xz) xz -dc "$moddir/$path" >"$root/lib/modules/$name.ko" ;;
    *.ko.zst) zstd -qdc "$moddir/$path" >"$root/lib/modules/$name.ko" ;;
    *) die "unsupported module file $path" ;;
  esac
  echo "$name" >>"$root/etc/metal/modules"
done
echo "root:x:0:0:root:/:/bin/sh" >"$root/etc/passwd"
echo "root:x:0:" >"$root/etc/group"

mkdir -p "$WORK/out"
cp "$vmlinuz" "$WORK/out/vmlinuz"
# Sorted names and -R 0:0 keep the archive independent of the build user and directory order.
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) |
  gzip -9n >"$WORK/out/initramfs.cpio.gz"

{
  echo "kernel_package=$kernel_pkg"
  echo "kernel_version=$kernel_ver"
  echo "kernel_release=$kver"
  echo "busybox_version=$busybox_ver"
  echo "modules=$(tr '\n' ' ' <"$root/etc/metal/modules" | sed 's/ $//')"
  echo "builtin=${builtins[*]}"
  echo "vmlinuz_bytes=$(stat -c %s "$WORK/out/vmlinuz")"
  echo "initramfs_bytes=$(stat -c %s "$WORK/out/initramfs.cpio.gz")"
} >"$WORK/out/manifest.txt"
touch "$WORK/out/.complete"

# Rename is atomic; a concurrent build that finished first wins and ours is dropped.
if ! mv -T "$WORK/out" "$OUT" 2>/dev/null; then
  [[ -f "$OUT/.complete" ]] || die "could not move the artefacts to $OUT"
fi
# Other keys are what earlier checkouts built; drop the ones unused for a week, and builds that
# were killed half-way.
find "$CACHE/vm" -mindepth 2 -maxdepth 2 -name .complete -mtime +7 -printf '%h\0' |
  xargs -0 -r rm -rf
find "$CACHE/vm" -mindepth 1 -maxdepth 1 -name '.build-*' -mmin +120 -exec rm -rf {} +
log "built $OUT in $(($(date +%s) - started))s: $(sed -n 's/^modules=//p' "$OUT/manifest.txt")"
echo "$OUT"
