#!/usr/bin/env bash
# Installs the Debian packages the QEMU end-to-end stack and the rule tests (promtool) need. Idempotent: when every package is
# already installed it does nothing and never touches apt. `apt-get update` runs only when the
# first install attempt fails (typically a missing or stale package list).
set -euo pipefail

PACKAGES=(
  qemu-system-x86   # qemu-system-x86_64 (TCG; KVM when /dev/kvm exists)
  qemu-utils        # qemu-img, for the empty disk that Hdd boots sit on
  ipxe-qemu         # /usr/lib/ipxe/qemu/pxe-virtio.rom (BIOS) and efi-virtio.rom (UEFI), the NIC option ROMs that network-boot
  ovmf              # /usr/share/OVMF/OVMF_CODE_4M.fd + OVMF_VARS_4M.fd, the UEFI firmware of UEFI VMs
  ipxe              # /usr/lib/ipxe/snponly.efi + undionly.kpxe, served over TFTP to PXE clients without iPXE
  dnsmasq-base      # /usr/sbin/dnsmasq, the DHCP + TFTP server of the bridged test network
  iproute2          # ip netns / link / tuntap, the bridged test network
  systemd-boot-efi  # /usr/lib/systemd/boot/efi/linuxx64.efi.stub, the EFI stub of UEFI HTTP boot UKIs
  binutils          # objcopy, which assembles the UKIs
  mtools            # mformat, mmd, mcopy: the EFI system partition image of virtual-media ISOs
  xorriso           # the El Torito ISO of virtual-media boots (bootserver/vmedia-iso.ts)
  busybox-static    # the whole userland of the test initramfs
  cpio              # packs the initramfs
  gzip
  kmod              # depmod-free modules.dep reading is enough, but modinfo helps debugging
  docker-registry   # the CNCF distribution registry: OCI image tests and the local stack's image registry
  apache2-utils     # htpasswd (bcrypt), for the registry's pull-secret tests
  prometheus        # promtool: hack/test.sh checks and unit-tests config/prometheus/rules.yaml
  # The single-node cluster of the in-cluster tests (src/localstack/cluster.ts) and its image build:
  containerd        # the container runtime the kubelet talks CRI to (with runc)
  runc
  containernetworking-plugins  # /usr/lib/cni: bridge, host-local, portmap, loopback
  iptables          # kube-proxy's Service rules
  conntrack         # kube-proxy clears stale UDP/NodePort entries with it
  buildah           # builds the operator image from the Dockerfile (hack/build-image.sh)
  debootstrap       # the Debian bookworm root file system of the local base images
)

log() { echo "[install-packages] $*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  # An installed package reports "install ok installed"; a removed one may still be known to dpkg
  # with another status, so the status text is what counts, not the exit code.
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  log "all present: ${PACKAGES[*]}"
  exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { log "not root and no sudo: install ${missing[*]} yourself"; exit 1; }
  SUDO=(sudo)
fi

install() {
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

log "installing: ${missing[*]}"
if ! install; then
  log "install failed; refreshing package lists and retrying"
  "${SUDO[@]}" apt-get update
  install
fi
log "done"
