package main

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

const completionUsage = `Usage: bagkeeper completion bash|zsh

Prints a shell completion script for bagkeeper's commands, subcommands and
flags. Load it in the current shell, or from the shell's startup file:

  source <(bagkeeper completion bash)     # bash (~/.bashrc)
  source <(bagkeeper completion zsh)      # zsh (~/.zshrc)`

// subcommands of the commands that have them ("" for the command alone).
var subcommands = map[string][]string{
	"bags":     {"", "set"},
	"relation": {"ensure", "remove"},
	"unit":     {"remove", "retry"},
	"actions":  {"run", "show", "list"},
	"member":   {"remove"},
	"leader":   {"transfer"},
	"snapshot": {"save", "status", "verify", "restore"},
}

func cmdCompletion(e *env, args []string) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintln(e.stdout, completionUsage)
		return nil
	}
	if len(args) != 1 || args[0] != "bash" && args[0] != "zsh" {
		return usageErrorf("expected 'completion bash' or 'completion zsh'")
	}
	script := bashCompletion()
	if args[0] == "zsh" {
		script = "# zsh completion for bagkeeper, through zsh's bash completion support\nautoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n" + script
	}
	fmt.Fprint(e.stdout, script)
	return nil
}

// flagsOf lists the flags of a command path, as its --help prints them.
func flagsOf(path ...string) []string {
	var out bytes.Buffer
	e := &env{stdout: &out, stderr: &bytes.Buffer{}, stdin: strings.NewReader(""), lookupEnv: func(string) (string, bool) { return "", false }}
	runMain(e, append(path, "--help"))
	var flags []string
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  (--[a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			flags = append(flags, m[1])
		}
	}
	sort.Strings(flags)
	return flags
}

func bashCompletion() string {
	var b strings.Builder
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	b.WriteString("# bash completion for bagkeeper (bagkeeper completion bash)\n")
	b.WriteString("_bagkeeper() {\n")
	b.WriteString("\tlocal cur=\"${COMP_WORDS[COMP_CWORD]}\" cmd=\"${COMP_WORDS[1]}\" sub=\"${COMP_WORDS[2]}\" words\n")
	b.WriteString("\tCOMPREPLY=()\n")
	fmt.Fprintf(&b, "\tif [[ $COMP_CWORD -eq 1 ]]; then\n\t\tCOMPREPLY=($(compgen -W %q -- \"$cur\"))\n\t\treturn\n\tfi\n", strings.Join(names, " "))
	b.WriteString("\tcase \"$cmd\" in\n")
	for _, c := range commands() {
		subs, ok := subcommands[c.name]
		if !ok {
			fmt.Fprintf(&b, "\t%s) words=%q ;;\n", c.name, strings.Join(flagsOf(c.name), " "))
			continue
		}
		var named []string
		for _, s := range subs {
			if s != "" {
				named = append(named, s)
			}
		}
		fmt.Fprintf(&b, "\t%s)\n\t\tcase \"$sub\" in\n", c.name)
		for _, s := range named {
			fmt.Fprintf(&b, "\t\t%s) words=%q ;;\n", s, strings.Join(flagsOf(c.name, s), " "))
		}
		alone := ""
		if subs[0] == "" {
			alone = " " + strings.Join(flagsOf(c.name), " ")
		}
		fmt.Fprintf(&b, "\t\t*) [[ $COMP_CWORD -eq 2 ]] && words=%q ;;\n\t\tesac ;;\n", strings.Join(named, " ")+alone)
	}
	b.WriteString("\tesac\n")
	b.WriteString("\tif [[ -z \"$words\" && \"$cur\" != -* ]]; then\n\t\tCOMPREPLY=($(compgen -f -- \"$cur\"))\n\t\treturn\n\tfi\n")
	b.WriteString("\tCOMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n")
	b.WriteString("}\ncomplete -F _bagkeeper bagkeeper\n")
	return b.String()
}
