#!/usr/bin/env bash
# Builds Debian packages for the router and the portproxy from this workspace, with
# dpkg-deb only (no cargo-deb to install): stripped release binaries, the systemd
# unit, the example config as a conffile, and a postinst that creates the service
# user. Output: target/debian/{router,portproxy}_<version>_<arch>.deb
#   bash deploy/package.sh                     # release build (the router profile-
#                                              # guided: deploy/pgo.sh), both packages
#   bash deploy/package.sh --no-pgo            # a plain release build of the router
#   bash deploy/package.sh --no-build [--profile debug] [--out DIR]
#                                              # package binaries already built
set -euo pipefail
cd "$(dirname "$0")/.."
build=1 pgo=1 profile=release out=target/debian
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) build=0; shift ;;
    --no-pgo) pgo=0; shift ;;
    --profile) profile=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: deploy/package.sh [--no-build] [--no-pgo] [--profile release|debug] [--out DIR]" >&2; exit 2 ;;
  esac
done
# The router's binary: the profile-guided one when this script builds it.
router_bin="target/$profile/router"
if [ "$build" = 1 ]; then
  cargo build --release --locked -p router -p portproxy
  if [ "$pgo" = 1 ]; then
    bash deploy/pgo.sh
    router_bin=target/pgo/router
  fi
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
mkdir -p "$out"

# pkg NAME DESCRIPTION
pkg() {
  local name=$1 desc=$2 root
  root=$(mktemp -d)
  chmod 0755 "$root"
  trap 'rm -rf "$root"' RETURN
  install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/$name" "$root/usr/share/doc/$name"
  local bin="target/$profile/$name"
  [ "$name" = router ] && bin=$router_bin
  install -m 0755 "$bin" "$root/usr/bin/$name"
  strip --strip-unneeded "$root/usr/bin/$name"
  install -m 0644 "deploy/systemd/$name.service" "$root/lib/systemd/system/$name.service"
  install -m 0644 README.md "$root/usr/share/doc/$name/README.md"
  install -d "$root/usr/share/doc/$name/docs"
  install -m 0644 docs/*.md "$root/usr/share/doc/$name/docs/"
  case $name in
    router)
      install -m 0640 deploy/examples/router.yaml "$root/etc/router/router.yaml"
      install -d "$root/usr/lib/router" "$root/usr/share/doc/router/keepalived" "$root/usr/share/doc/router/prometheus" "$root/usr/share/doc/router/grafana" "$root/usr/share/doc/router/activemq"
      for s in router-check router-notify router-handover vrrp-flag gen-config; do install -m 0755 "keepalived/$s" "$root/usr/lib/router/$s"; done
      install -m 0644 keepalived/README.md "$root/usr/share/doc/router/keepalived/README.md"
      install -m 0644 deploy/prometheus/*.yml "$root/usr/share/doc/router/prometheus/"
      install -m 0644 deploy/grafana/router-dashboard.json "$root/usr/share/doc/router/grafana/"
      install -m 0644 deploy/activemq/activemq-routers.xml "$root/usr/share/doc/router/activemq/"
      # The spool the packaged configuration reads (spi.source: spool): the unit's
      # ProtectSystem=strict leaves the router no way to create it itself.
      install -d -m 0750 "$root/var/spool/router"
      ;;
    portproxy)
      # Gear mode on, cluster mode commented out: cluster mode needs the Simplenetes
      # files (proxy.conf, hosts.conf, portmappings.conf) the operator provides; a
      # packaged config that names missing files would never start.
      awk '/^cluster:/ { off = 1; print "# Cluster mode: uncomment with the Simplenetes files in place."; }
           { print (off && $0 != "" ? "# " $0 : $0) }' deploy/examples/portproxy/portproxy.yaml \
        > "$root/etc/portproxy/portproxy.yaml"
      chmod 0640 "$root/etc/portproxy/portproxy.yaml"
      ;;
  esac
  (cd "$root" && find etc -type f | sed 's#^#/#') > "$root/DEBIAN/conffiles"
  cat > "$root/DEBIAN/control" <<CONTROL
Package: $name
Version: $version
Architecture: $arch
Maintainer: Routing layer team <routing@example.com>
Section: net
Priority: optional
Depends: adduser, libc6, curl
Recommends: keepalived, nftables
Installed-Size: $(du -sk "$root" | cut -f1)
Description: $desc
CONTROL
  cat > "$root/DEBIAN/postinst" <<POSTINST
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
  if ! getent passwd $name >/dev/null; then
    adduser --system --group --home /var/lib/$name --no-create-home --quiet $name
  fi
  chgrp $name /etc/$name/$name.yaml && chmod 0640 /etc/$name/$name.yaml
  if [ -d /var/spool/$name ]; then chown $name:$name /var/spool/$name; fi
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
    systemctl enable $name.service >/dev/null || true
  fi
fi
exit 0
POSTINST
  cat > "$root/DEBIAN/prerm" <<PRERM
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "\$1" = remove ]; then
  systemctl stop $name.service >/dev/null 2>&1 || true
  systemctl disable $name.service >/dev/null 2>&1 || true
fi
exit 0
PRERM
  cat > "$root/DEBIAN/postrm" <<POSTRM
#!/bin/sh
set -e
# Purge: the state and the spool the service wrote go with the configuration (the
# service user stays, as Debian's packages leave theirs).
if [ "\$1" = purge ]; then
  rm -rf /var/lib/$name /var/spool/$name
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
POSTRM
  chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
  dpkg-deb --root-owner-group --build "$root" "$out/${name}_${version}_${arch}.deb" >/dev/null
  echo "$out/${name}_${version}_${arch}.deb"
}

pkg router "HA HTTP/TLS router for OpenShift-style applications, fed by routing-SPI events"
pkg portproxy "Node TCP port proxy: OpenShift gear ports and Simplenetes cluster ports"
