package main

// Shell words: quoting, variable names, and parsing `export -p` output.

import (
	"strings"
)

func shellQuote(text string) string {
	return "'" + strings.ReplaceAll(text, "'", `'\''`) + "'"
}

func validName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		if !(r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (i > 0 && r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

// parseExports reads `export -p` as bash (declare -x NAME="v"), dash and busybox
// (export NAME='v') print it, into KEY=VALUE pairs. Variables without a value are skipped.
func parseExports(text string) []string {
	var env []string
	i := 0
	for i < len(text) {
		for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n') {
			i++
		}
		switch {
		case strings.HasPrefix(text[i:], "declare "):
			i += len("declare ")
			for i < len(text) && text[i] == '-' { // flags: -x, -rx, ...
				for i < len(text) && text[i] != ' ' {
					i++
				}
				i++
			}
		case strings.HasPrefix(text[i:], "export "):
			i += len("export ")
		default:
			for i < len(text) && text[i] != '\n' {
				i++
			}
			continue
		}
		start := i
		for i < len(text) && text[i] != '=' && text[i] != '\n' && text[i] != ' ' {
			i++
		}
		name := text[start:i]
		if i >= len(text) || text[i] != '=' {
			continue
		}
		i++
		value, next := shellWord(text, i)
		i = next
		if validName(name) {
			env = append(env, name+"="+value)
		}
	}
	return env
}

// shellWord reads one shell word made of '...', "...", \x and plain characters.
func shellWord(text string, i int) (string, int) {
	var b strings.Builder
	for i < len(text) {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			return b.String(), i
		case c == '\'':
			end := strings.IndexByte(text[i+1:], '\'')
			if end < 0 {
				b.WriteString(text[i+1:])
				return b.String(), len(text)
			}
			b.WriteString(text[i+1 : i+1+end])
			i += end + 2
		case c == '"':
			i++
			for i < len(text) && text[i] != '"' {
				if text[i] == '\\' && i+1 < len(text) && strings.IndexByte("\"\\$`\n", text[i+1]) >= 0 {
					if text[i+1] != '\n' {
						b.WriteByte(text[i+1])
					}
					i += 2
					continue
				}
				b.WriteByte(text[i])
				i++
			}
			i++
		case c == '\\' && i+1 < len(text):
			b.WriteByte(text[i+1])
			i += 2
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), i
}
