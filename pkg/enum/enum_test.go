package enum

import "testing"

type color string

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in, want string
		allowed  []color
		err      string
	}{
		{in: "", want: "red", allowed: []color{"red", "blue"}},
		{in: "blue", want: "blue", allowed: []color{"red", "blue"}},
		{in: "Blue", allowed: []color{"red", "blue"}, err: `"Blue": must be red or blue`},
		{in: " red", allowed: []color{"red", "blue", "green"}, err: `" red": must be one of red, blue, green`},
		{in: "x", allowed: []color{"red"}, err: `"x": must be red`},
		{in: "x", err: `"x": no value is allowed`},
	} {
		got, err := Parse(c.in, color("red"), c.allowed...)
		if c.err != "" {
			if err == nil || err.Error() != c.err || got != "" {
				t.Errorf("Parse(%q) = %q, %v; want error %s", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}
