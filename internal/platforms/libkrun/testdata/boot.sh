set -eu
mkdir -p /run/layerfs /var/lib/layerfs/store
[ -e /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229
chmod 0755 /usr/local/bin/layerfsd
userns=; v=$(uname -r); maj=${v%%.*}; min=${v#*.}; min=${min%%.*}; if [ "$maj" -lt 6 ] || { [ "$maj" -eq 6 ] && [ "$min" -lt 12 ]; }; then userns=--no-user-namespace; fi
exec /usr/local/bin/layerfsd serve $userns --store /var/lib/layerfs/store --socket /run/layerfs/layerfsd.sock --tcp 0.0.0.0:7411 --token-file /etc/layerfs/token </dev/null >>/var/log/layerfsd.log 2>&1
