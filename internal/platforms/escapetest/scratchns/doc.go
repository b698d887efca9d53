// Command scratchns runs a command in a scratch user namespace where no
// user namespace can be made, for the escape suite's fail-closed cases:
//
//	scratchns CMD [ARGS...]
//
// It starts itself again as root of a new user namespace that maps every
// host id to itself (so files and sockets keep their owners), and that
// copy sets the namespace's user.max_user_namespaces to 0 and becomes CMD.
// CMD then runs with the host's ids, but any attempt of its to make a user
// namespace fails with ENOSPC, as on a host that allows none. The exit
// status is CMD's; stdio is passed through.
package main
