package prewake

import "testing"

// R5n: however the bytes of a hello are cut into reads, the reader reads
// at most maxHello, keeps at most maxHello, ends once it has maxHello, and
// comes to the same name as when fed one byte at a time.
func FuzzHelloCuts(f *testing.F) {
	f.Add(clientHello(f, "app.example.test"), uint8(3), uint8(5))
	f.Add(paddedHello("app.example.test", 3000, true), uint8(200), uint8(1))
	f.Add(paddedHello("app.example.test", 3000, false), uint8(7), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, step, step2 uint8) {
		feedAll := func(s int) helloReader {
			var r helloReader
			for i := 0; i < len(b) && !r.done; i += s {
				r.feed(b[i:min(i+s, len(b))])
				if r.fed > maxHello || cap(r.sni) > maxHello {
					t.Fatalf("read %d bytes, kept %d", r.fed, cap(r.sni))
				}
			}
			if len(b) >= maxHello && !r.done {
				t.Fatalf("not done after %d bytes", len(b))
			}
			return r
		}
		a, c, one := feedAll(int(step)+1), feedAll(int(step2)+1), feedAll(1)
		if a.done != one.done || a.name != one.name || c.done != one.done || c.name != one.name {
			t.Fatalf("cuts change the outcome: %v %q / %v %q / %v %q", a.done, a.name, c.done, c.name, one.done, one.name)
		}
	})
}
