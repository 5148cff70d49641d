// Package lbpolicy holds the selection policies of reverse_proxy
// (http.reverse_proxy.selection_policies) that see which instance each
// upstream is: dicer_weighted, by the instances' weights (R4c), and
// dicer_sticky, sessions kept on an instance's identity (R4d). They read
// what the upstream sources recorded for the request (package pick).
package lbpolicy
