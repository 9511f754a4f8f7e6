package hooktools

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// testFlags declares bool -a, -b, --app, string -r/--relation and -o.
type testFlags struct {
	a, b, app bool
	r, o      string
}

func (tf *testFlags) set() *flagSet {
	fs := newFlagSet()
	fs.boolVar(&tf.a, "a", "a")
	fs.boolVar(&tf.b, "b", "b")
	fs.boolVar(&tf.app, "app", "app")
	fs.stringVar(&tf.r, "", "r", "r", "relation")
	fs.stringVar(&tf.o, "", "o", "o")
	return fs
}

// The gnuflag rules the hook tools depend on.
func TestFlagParsing(t *testing.T) {
	for _, tc := range []struct {
		name       string
		argv       []string
		want       testFlags
		positional []string
		err        string
	}{
		{name: "no arguments", argv: args()},
		{name: "interspersed", argv: args("x", "--app", "y", "-r", "3"), want: testFlags{app: true, r: "3"}, positional: args("x", "y")},
		{name: "ops 2.9 order", argv: args("-r", "3", "-", "app/0", "--app", "--relation=db:3"), want: testFlags{app: true, r: "db:3"}, positional: args("-", "app/0")},
		{name: "double dash ends options", argv: args("--app", "--", "-a", "--x", "-"), want: testFlags{app: true}, positional: args("-a", "--x", "-")},
		{name: "dash and empty are positional", argv: args("-", "", "-a"), want: testFlags{a: true}, positional: args("-", "")},
		{name: "short value attached", argv: args("-rdb:3"), want: testFlags{r: "db:3"}},
		{name: "short value next", argv: args("-r", "-a"), want: testFlags{r: "-a"}},
		{name: "run of bools", argv: args("-ab"), want: testFlags{a: true, b: true}},
		{name: "run ending in value option", argv: args("-abr", "7"), want: testFlags{a: true, b: true, r: "7"}},
		{name: "run with attached value", argv: args("-ar7"), want: testFlags{a: true, r: "7"}},
		{name: "long with equals", argv: args("--relation=x:1"), want: testFlags{r: "x:1"}},
		{name: "long empty value", argv: args("--relation="), want: testFlags{r: ""}},
		{name: "long with space", argv: args("--relation", "x:1"), want: testFlags{r: "x:1"}},
		{name: "single letter as long", argv: args("--r", "5"), want: testFlags{r: "5"}},
		{name: "bool True", argv: args("--app=True"), want: testFlags{app: true}},
		{name: "bool true", argv: args("--app=true"), want: testFlags{app: true}},
		{name: "bool False", argv: args("--app", "--app=False"), want: testFlags{}},
		{name: "bool 1", argv: args("--app=1"), want: testFlags{app: true}},
		{name: "bool takes no next arg", argv: args("--app", "false"), want: testFlags{app: true}, positional: args("false")},
		{name: "last one wins", argv: args("-r", "1", "-r", "2"), want: testFlags{r: "2"}},

		{name: "bad bool", argv: args("--app=maybe"), err: `invalid value "maybe" for option --app: strconv.ParseBool: parsing "maybe": invalid syntax`},
		{name: "empty bool", argv: args("--app="), err: `invalid value "" for option --app: strconv.ParseBool: parsing "": invalid syntax`},
		{name: "short bool with equals", argv: args("-a=true"), err: `invalid value "=true" for option -a: strconv.ParseBool: parsing "=true": invalid syntax`},
		{name: "unknown long", argv: args("--bogus"), err: "option provided but not defined: --bogus"},
		{name: "unknown long with value", argv: args("--bogus=1"), err: "option provided but not defined: --bogus"},
		{name: "unknown one-letter long", argv: args("--x"), err: "option provided but not defined: -x"},
		{name: "unknown short", argv: args("-x"), err: "option provided but not defined: -x"},
		{name: "unknown in run", argv: args("-ax"), err: "option provided but not defined: -x"},
		{name: "negative number", argv: args("-42"), err: "option provided but not defined: -4"},
		{name: "unknown multibyte", argv: args("-é"), err: "option provided but not defined: --é"},
		{name: "triple dash", argv: args("---"), err: "option provided but not defined: --"},
		{name: "missing short value", argv: args("-r"), err: "option needs an argument: -r"},
		{name: "missing long value", argv: args("x", "--relation"), err: "option needs an argument: --relation"},
		{name: "empty long name", argv: args("--=x"), err: `empty option in argument "--=x"`},
		{name: "first error wins", argv: args("-x", "--bogus"), err: "option provided but not defined: -x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got testFlags
			positional, err := got.set().parse(tc.argv)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || !slices.Equal(positional, tc.positional) {
				t.Errorf("got %+v %q, want %+v %q", got, positional, tc.want, tc.positional)
			}
			if len(tc.positional) == 0 && positional != nil {
				t.Errorf("positional = %#v, want nil", positional)
			}
		})
	}
}

// -h and --help ask for help unless declared; the first problem wins.
func TestFlagHelp(t *testing.T) {
	for _, argv := range [][]string{args("-h"), args("--help"), args("--help=1"), args("x", "-ah"), args("-r", "1", "--help", "--bogus")} {
		var tf testFlags
		if _, err := tf.set().parse(argv); !errors.Is(err, errHelp) {
			t.Errorf("%q: err = %v", argv, err)
		}
	}
	var tf testFlags
	if _, err := tf.set().parse(args("-r", "-h")); err != nil || tf.r != "-h" {
		t.Errorf("-r -h: %v %q", err, tf.r)
	}
}

// The option list of help: sorted by shortest name, names joined, string
// defaults quoted.
func TestPrintDefaults(t *testing.T) {
	var tf testFlags
	fs := tf.set()
	var b bytes.Buffer
	fs.printDefaults(&b)
	want := "-a  (= false)\n    a\n" +
		"--app  (= false)\n    app\n" +
		"-b  (= false)\n    b\n" +
		"-o (= \"\")\n    o\n" +
		"-r, --relation (= \"\")\n    r\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
