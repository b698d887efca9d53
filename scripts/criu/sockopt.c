/*
 * sockopt.c: preloaded into CRIU 4.1.1 by scripts/ensure-criu.
 *
 * Linux 6.16 and later refuse getsockopt(SOL_SOCKET, SO_PASSCRED) and
 * SO_PASSSEC on sockets of families that never pass credentials (inet and
 * inet6 among them) with EOPNOTSUPP. CRIU 4.1.1 reads both options of every
 * socket it dumps and gives up on the first refusal, so it cannot dump a TCP
 * or UDP socket on such a kernel (CRIU after 4.1.1 reads them only for unix
 * and netlink sockets). This getsockopt answers "unset" (0) for exactly
 * those two options on inet and inet6 sockets when the kernel refuses them,
 * which is what they are: such a socket cannot have them set. Every other
 * call is the system call itself. CRIU then records them as unset and
 * restores nothing for them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

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
