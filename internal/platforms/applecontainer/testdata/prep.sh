set -eu
mkdir -p /var/lib/layerfs/run /var/lib/layerfs/store
[ -e /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229
if [ -f /var/lib/layerfs/run/layerfsd.pid ] && kill -0 "$(cat /var/lib/layerfs/run/layerfsd.pid)" 2>/dev/null; then kill "$(cat /var/lib/layerfs/run/layerfsd.pid)"; i=0; while kill -0 "$(cat /var/lib/layerfs/run/layerfsd.pid)" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; fi
rm -f /var/lib/layerfs/run/layerfsd.sock
