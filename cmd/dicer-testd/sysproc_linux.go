package main

import "syscall"

// instanceSysProcAttr puts an instance's process in a process group of its
// own and has the kernel kill it when the daemon dies, even frozen.
func instanceSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
