/*
 * preload.c: preloaded into CRIU 4.1.1 by scripts/ensure-criu. It changes
 * two things CRIU 4.1.1 does, each only where it would otherwise fail for a
 * reason that is not the checkpoint's.
 *
 * 1. getsockopt. Linux 6.16 and later refuse getsockopt(SOL_SOCKET,
 * SO_PASSCRED) and SO_PASSSEC on sockets of families that never pass
 * credentials (inet and inet6 among them) with EOPNOTSUPP. CRIU 4.1.1 reads
 * both options of every socket it dumps and gives up on the first refusal,
 * so it cannot dump a TCP or UDP socket on such a kernel (CRIU after 4.1.1
 * reads them only for unix and netlink sockets). Here they read as unset
 * (0) on inet and inet6 sockets when the kernel refuses them, which is what
 * they are: such a socket cannot have them set. CRIU then records them
 * unset and restores nothing for them.
 *
 * 2. The check that a dumped user namespace owns the other namespaces.
 * Before it dumps a tree in a user namespace of its own, CRIU forks a
 * child that keeps its capabilities (prctl(PR_SET_KEEPCAPS, 1), which CRIU
 * calls nowhere else), enters that user namespace and opens the tree's
 * root's /proc/PID/ns files from inside it, failing the dump if it cannot.
 * A LayerFS sandbox's init is exec'd from a binary its user namespace may
 * not read, so its /proc files are the host root's to open only (by
 * design: nothing inside may inspect it), and the open fails with EACCES
 * however the namespaces are owned. In that child (and only there) the
 * user namespace is not entered; every later setns of the child instead
 * checks with NS_GET_USERNS that the namespace it enters is owned by that
 * user namespace, and refuses it (EINVAL) otherwise: the check CRIU meant,
 * made from the host.
 *
 * Every other call is the system call itself.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef NS_GET_USERNS
#define NS_GET_USERNS 0xb701
#endif

int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	int domain, saved;
	socklen_t dlen = sizeof(domain);

	if (syscall(SYS_getsockopt, fd, level, name, val, len) == 0)
		return 0;
	if (errno != EOPNOTSUPP || level != SOL_SOCKET || (name != SO_PASSCRED && name != SO_PASSSEC))
		return -1;
	saved = errno;
	if (syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) != 0 ||
	    (domain != AF_INET && domain != AF_INET6) || val == NULL || len == NULL || *len < sizeof(int)) {
		errno = saved;
		return -1;
	}
	*(int *)val = 0;
	*len = sizeof(int);
	return 0;
}

/* The user namespace check's child: set by PR_SET_KEEPCAPS (a fork's
 * copy of this process's memory is its own, so the parent is unaffected). */
static int userns_check;
static int have_owner;
static struct stat owner;

int prctl(int option, ...)
{
	va_list ap;
	unsigned long a2, a3, a4, a5;

	va_start(ap, option);
	a2 = va_arg(ap, unsigned long);
	a3 = va_arg(ap, unsigned long);
	a4 = va_arg(ap, unsigned long);
	a5 = va_arg(ap, unsigned long);
	va_end(ap);
	if (option == PR_SET_KEEPCAPS && a2 == 1)
		userns_check = 1;
	return syscall(SYS_prctl, option, a2, a3, a4, a5);
}

int setns(int fd, int nstype)
{
	struct stat st;
	int u, same;

	if (!userns_check)
		return syscall(SYS_setns, fd, nstype);
	if (nstype == CLONE_NEWUSER) {
		if (fstat(fd, &owner) != 0)
			return -1;
		have_owner = 1;
		return 0;
	}
	if (have_owner) {
		u = ioctl(fd, NS_GET_USERNS);
		if (u < 0)
			return -1;
		same = fstat(u, &st) == 0 && st.st_dev == owner.st_dev && st.st_ino == owner.st_ino;
		close(u);
		if (!same) {
			errno = EINVAL;
			return -1;
		}
	}
	return syscall(SYS_setns, fd, nstype);
}
