//go:build unix && !linux

package main

import "syscall"

// instanceSysProcAttr puts an instance's process in a process group of its
// own.
func instanceSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
