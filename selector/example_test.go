package selector_test

import (
	"errors"
	"fmt"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

func Example() {
	sel, err := selector.Parse("app = web, tier notin (canary), !internal")
	if err != nil {
		panic(err)
	}
	fmt.Println(sel)
	fmt.Println(sel.Matches(map[string]string{"app": "web", "tier": "stable"}))
	fmt.Println(sel.Matches(map[string]string{"app": "web", "tier": "canary"}))
	fmt.Println(sel.Matches(map[string]string{"app": "web"}))
	fmt.Println(sel.Matches(map[string]string{"app": "web", "internal": "true"}))
	// Output:
	// app=web,tier notin (canary),!internal
	// true
	// false
	// true
	// false
}

func ExampleParse_error() {
	_, err := selector.Parse("tier in (a")
	fmt.Println(err)
	var se *selector.SyntaxError
	if errors.As(err, &se) {
		fmt.Println(se.Offset, se.Msg)
	}
	// Output:
	// selector "tier in (a": at offset 10: expected "," or ")"
	// 10 expected "," or ")"
}
