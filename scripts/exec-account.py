#!/usr/bin/env python3
"""The per-part CPU account of execs, from perf (see scripts/exec-account).

usage: exec-account.py PERF_SCRIPT_OUTPUT HZ EXECS INIT_BINARY

PERF_SCRIPT_OUTPUT is `perf script --show-task-events -F
comm,pid,tid,ip,sym,dso` of a `perf record -a -g -F HZ` of `layerfs bench
spawn --parts exec`. The process tree comes from the fork and exec events:
the first `layerfs` is the bench (the SDK), its `layerfsd` child the daemon,
the daemon's child the spawner (with a user namespace) or an init (without),
and so on down. INIT_BINARY resolves the init's frames (perf cannot: it runs
from a sealed memfd).
"""
import bisect
import collections
import re
import subprocess
import sys

path, hz, execs, init_binary = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
ms_per_sample = 1000.0 / hz

syms = []
nm = subprocess.run(['go', 'tool', 'nm', '-sort', 'address', init_binary], capture_output=True, text=True).stdout
for l in nm.splitlines():
    p = l.split()
    if len(p) >= 3 and p[1] in 'Tt':
        syms.append((int(p[0], 16), p[2]))
addrs = [a for a, _ in syms]


def gosym(ip):
    i = bisect.bisect_right(addrs, ip) - 1
    return syms[i][1] if i >= 0 else '[unknown]'


parent, samples = {}, []  # samples: (pid, comm, frames, leaf first)
bench = daemon = None
fork_re = re.compile(r'PERF_RECORD_FORK\((\d+):(\d+)\):\((\d+):(\d+)\)')
comm_re = re.compile(r'PERF_RECORD_COMM exec: (.*):(\d+)/(\d+)')
frame_re = re.compile(r'\s*([0-9a-f]+) (\S+)')
cur = None
for line in open(path):
    if line.strip() and line[0].isspace():
        m = frame_re.match(line)
        if m and cur:
            name = m.group(2).split('+')[0]
            if name == '[unknown]' and 'memfd:layerfs-sandbox-init' in line:
                # perf gives the offset in the file, which a static Go
                # binary maps at 0x400000.
                name = gosym(int(m.group(1), 16) + 0x400000)
            cur[2].append(name)
        continue
    if cur:
        samples.append(cur)
        cur = None
    if not line.strip():
        continue
    m = fork_re.search(line)
    if m:
        child, _, par, _ = map(int, m.groups())
        if child != par:
            parent[child] = par
        continue
    m = comm_re.search(line)
    if m:
        name, pid = m.group(1), int(m.group(2))
        if name == 'layerfs' and bench is None:
            bench = pid
        if name == 'layerfsd' and daemon is None and parent.get(pid) == bench:
            daemon = pid
        continue
    if 'PERF_RECORD' in line:
        continue
    f = line.split()
    cur = (int(f[1].split('/')[0]), f[0], [])
if cur:
    samples.append(cur)
if daemon is None:
    sys.exit('no layerfsd under the bench in ' + path)


def depth_below(pid, root):
    d = 0
    while pid in parent and d < 32:
        d += 1
        pid = parent[pid]
        if pid == root:
            return d
    return None


def has(frames, *keys):
    return any(k in frames for k in keys)


def go_first(frames, rules):
    for f in frames:
        for name, keys in rules:
            if any(k in f for k in keys):
                return name
    return None


MOUNT_CALLS = ('copy_mnt_ns', 'umount_tree', 'namespace_unlock', 'cleanup_mnt', '__cleanup_mnt', 'mntput_no_expire',
               'put_mnt_ns', 'free_mnt_ns', '__x64_sys_mount', '__x64_sys_umount', '__do_sys_pivot_root',
               '__do_sys_move_mount', '__x64_sys_open_tree', '__x64_sys_mount_setattr', '__x64_sys_unshare',
               '__x64_sys_setns', 'drop_collected_mounts', 'dissolve_on_fput', '__do_sys_fsmount', '__x64_sys_fsopen',
               '__do_sys_fsconfig')
MOUNT = 'mount namespace: the root built, reset, torn down (init)'
SERVE = 'init: serve the exec (fork the command, reap, report)'
NETNS = 'network namespace: made (the spawner\'s clone of the init)'

DAEMON_RULES = [
    ('cgroups: made, limited, removed (launcher)', ['sandbox.(*cgroupDirs)', 'sandbox.(*execCgroup)']),
    ('clones of the runtime and workspace, id-mapped (launcher)',
     ['sandbox.rootEntries', 'sandbox.cloneWorkspace', 'sandbox.(*Launcher).cloneWorkspace', 'userns.IDMap', 'sandbox.entryAt']),
    ('warm pool refill (the launcher\'s part)', ['sandbox.(*Launcher).warmOne', 'sandbox.(*Launcher).topUp']),
    ('launcher: start, send, report, reap', ['layerfs/internal/platforms/local/sandbox.']),
    ('engine: exec path and receipt', ['engine.(*Engine).Exec', 'local.(*Sandbox).Exec']),
    ('engine: workspace open (mounts, Store)', ['engine.(*Engine).CreateWorkspace', 'engine.(*Engine).ForkBranch']),
    ('engine: workspace end (unmounts, Store)', ['engine.(*Engine).EndWorkspace']),
    ('API: HTTP server, routing, JSON', ['net/http.', 'internal/api.', 'encoding/json', 'bufio.']),
    ('layerfsd: Go runtime (scheduler, GC, timers)', ['runtime.']),
]
INIT_RULES = [
    (MOUNT, ['sandbox.buildRoot', 'sandbox.buildDev', 'sandbox.mask', 'sandbox.mountProc', 'sandbox.mountSys', 'sandbox.pivot',
             'sandbox.prepareRoot', 'sandbox.bindHostDev', 'sandbox.enterAhead', 'sandbox.enterNS', 'sandbox.resetSandbox',
             'sandbox.mountWorkspace', 'sandbox.enterNewRoot', 'sandbox.removeSysVIPC', 'sandbox.removeMessageQueues',
             'sandbox.mqueueMount', 'sandbox.(*mounter)', 'sandbox.receiveWorkspace']),
    ('network namespace: lo brought up (init)', ['sandbox.loopbackUp']),
    ('seccomp filter loaded (init)', ['sandbox.loadFilterFromEnv', 'sandbox.loadSyscallFilter', 'bpfload.']),
    ('privileges dropped (init)', ['sandbox.dropPrivileges', 'sandbox.keepOnlyKill', 'sandbox.keepAfterFork']),
    (SERVE, ['sandbox.run', 'sandbox.reap', 'sandbox.(*sandboxInit).run', 'sandbox.(*sandboxInit).serve', 'sandbox.receiveExec',
             'sandbox.(*sandboxInit).send', 'syscall.forkExec', 'sandbox.notStarted', 'sandbox.setRlimits', 'sandbox.lookPath',
             'sandbox.readSched', 'sandbox.ownCPU']),
]


def init_part(frames):
    part = go_first(frames, INIT_RULES)
    if part:
        return part
    if has(frames, *MOUNT_CALLS):
        return MOUNT
    if has(frames, 'do_seccomp'):
        return 'seccomp filter loaded (init)'
    if has(frames, 'copy_net_ns', 'setup_net'):
        return NETNS
    if has(frames, 'bprm_execve', '__x64_sys_execve') or has(frames, 'asm_exc_page_fault') and not has(frames, '__do_sys_wait4'):
        return 'init process: exec of the init binary, Go runtime start'
    if has(frames, 'do_exit', 'do_group_exit'):
        return 'init process: exit and namespace teardown'
    if has(frames, '__do_sys_wait4', '__x64_sys_kill', '__sys_recvmsg', 'ksys_write', '__x64_sys_chdir', '__x64_sys_close'):
        return SERVE
    if frames and frames[0].startswith(('runtime.', 'internal/runtime', 'sync.')) or \
            has(frames, '__x64_sys_futex', '__x64_sys_nanosleep', '__x64_sys_sched_yield', '__x64_sys_epoll_pwait', 'schedule'):
        return 'init: Go runtime (threads, scheduler)'
    return 'init: its own code and other calls'


def kworker_part(frames):
    if has(frames, 'cleanup_net'):
        return 'network namespace teardown (cleanup_net)'
    if any(f.startswith(('css_', 'mem_cgroup_css', 'cgroup_')) for f in frames):
        return 'cgroup release'
    if has(frames, 'delayed_mntput', 'cleanup_mnt', '__cleanup_mnt'):
        return 'mount release'
    if has(frames, 'free_ipc', 'proc_cleanup_work', 'delayed_free_pidns'):
        return 'IPC and PID namespace release'
    return None


acct, kworker = collections.Counter(), collections.Counter()
for pid, comm, frames in samples:
    if re.match(r'(kworker|ksoftirqd|rcu)', comm):
        part = kworker_part(frames)
        if part:
            kworker[part] += 1
        continue
    if pid == bench:
        acct['SDK (the client)'] += 1
        continue
    if pid == daemon:
        acct[go_first(frames, DAEMON_RULES) or 'layerfsd: other'] += 1
        continue
    d = depth_below(pid, daemon)
    if d is None:
        continue  # the native arm, or another process of the host
    if d == 1 and comm != 'layerfs-sandbox':  # the spawner, and an init up to its exec (the clone is its parent's)
        if has(frames, 'copy_net_ns', 'setup_net'):
            acct[NETNS] += 1
        elif has(frames, 'create_new_namespaces', 'copy_namespaces'):
            acct['PID, UTS, IPC namespaces: made (the spawner\'s clone)'] += 1
        else:
            acct['spawner: the fork of an init, its own work'] += 1
    elif d <= 2:
        acct[init_part(frames)] += 1
    else:
        acct['command (true): the fork\'s child, exec, run, exit'] += 1

total = sum(acct.values())
print('%-66s %8s %6s' % ('part', 'ms/exec', 'share'))
for k, n in sorted(acct.items(), key=lambda kv: -kv[1]):
    print('%-66s %8.3f %5.1f%%' % (k, n * ms_per_sample / execs, 100.0 * n / total))
print('%-66s %8.3f' % ('total: the daemon\'s process tree and the SDK', total * ms_per_sample / execs))
print('kernel workers (the whole host\'s, not only these execs\'):')
for k, n in sorted(kworker.items(), key=lambda kv: -kv[1]):
    print('  %-64s %8.3f' % (k, n * ms_per_sample / execs))
