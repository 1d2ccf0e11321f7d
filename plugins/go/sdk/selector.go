package kubewasm

// Kubernetes label selectors (kubectl's grammar), parsed and matched in the
// guest: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a`, `!a`,
// `a>N`, `a<N`, joined by commas. The empty selector matches everything.
// A port of the Rust SDK's selector.rs: same grammar, same errors.

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Pair is one label or annotation.
type Pair struct{ Key, Value string }

func lookup(pairs []Pair, key string) (string, bool) {
	for _, p := range pairs {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

type token struct {
	t, v string // t: word, not, =, !=, >, <, (, ), ","
}

func (t token) String() string {
	if t.t == "word" {
		return fmt.Sprintf("Word(%q)", t.v)
	}
	return t.t
}

const special = "!=(),<>"

func lex(text string) []token {
	var out []token
	rs := []rune(text)
	for i := 0; i < len(rs); {
		c := rs[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '!' && i+1 < len(rs) && rs[i+1] == '=':
			out = append(out, token{t: "!="})
			i += 2
		case c == '=' && i+1 < len(rs) && rs[i+1] == '=':
			out = append(out, token{t: "="})
			i += 2
		case c == '!':
			out = append(out, token{t: "not"})
			i++
		case strings.ContainsRune(special, c):
			out = append(out, token{t: string(c)})
			i++
		default:
			j := i
			for j < len(rs) && !strings.ContainsRune(special, rs[j]) && !unicode.IsSpace(rs[j]) {
				j++
			}
			out = append(out, token{t: "word", v: string(rs[i:j])})
			i = j
		}
	}
	return out
}

var (
	nameRe   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
	prefixRe = regexp.MustCompile(`^[A-Za-z0-9-]+$`)
)

func isName(s string) bool { return len(s) <= 63 && nameRe.MatchString(s) }

func checkKey(key string) error {
	prefix, name, has := strings.Cut(key, "/")
	if !has {
		prefix, name = "", key
	}
	ok := !has || (len(prefix) > 0 && len(prefix) <= 253)
	if has && ok {
		for _, p := range strings.Split(prefix, ".") {
			if !isName(p) || !prefixRe.MatchString(p) {
				ok = false
			}
		}
	}
	if !ok || !isName(name) {
		return fmt.Errorf("%q is not a valid label key", key)
	}
	return nil
}

func checkValue(v string) error {
	if v != "" && !isName(v) {
		return fmt.Errorf("%q is not a valid label value", v)
	}
	return nil
}

// Requirement is one term of a selector.
type Requirement struct {
	Op     string // =, !=, in, notin, exists, !, >, <
	Key    string
	Values []string
	N      int64
}

// Selector is a parsed label selector: every requirement must hold.
type Selector struct{ Reqs []Requirement }

type parser struct {
	toks []token
	pos  int
}

func (p *parser) peek() *token {
	if p.pos < len(p.toks) {
		return &p.toks[p.pos]
	}
	return nil
}

func (p *parser) next() *token {
	t := p.peek()
	p.pos++
	return t
}

func (p *parser) key() (string, error) {
	t := p.next()
	if t == nil {
		return "", errors.New("expected a label key")
	}
	if t.t == "word" && t.v != "in" && t.v != "notin" {
		return t.v, checkKey(t.v)
	}
	return "", fmt.Errorf("expected a label key but found %v", *t)
}

func (p *parser) value() (string, error) {
	t := p.peek()
	if t != nil && t.t == "word" {
		p.pos++
		return t.v, checkValue(t.v)
	}
	if t == nil || t.t == "," {
		return "", nil
	}
	return "", fmt.Errorf("expected a value but found %v", *t)
}

func (p *parser) integer() (int64, error) {
	t := p.next()
	if t == nil || t.t != "word" {
		return 0, errors.New("expected an integer")
	}
	n, err := strconv.ParseInt(t.v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", t.v)
	}
	return n, nil
}

func (p *parser) set() ([]string, error) {
	if t := p.next(); t == nil || t.t != "(" {
		return nil, errors.New("expected '(' to open a set of values")
	}
	var values []string
	for {
		v := p.next()
		if v == nil {
			return nil, errors.New("unterminated set of values")
		}
		if v.t != "word" {
			return nil, fmt.Errorf("expected a value in the set but found %v", *v)
		}
		if err := checkValue(v.v); err != nil {
			return nil, err
		}
		values = append(values, v.v)
		sep := p.next()
		if sep == nil {
			return nil, errors.New("unterminated set of values")
		}
		if sep.t == ")" {
			return values, nil
		}
		if sep.t != "," {
			return nil, fmt.Errorf("expected ',' or ')' but found %v", *sep)
		}
	}
}

func (p *parser) requirement() (Requirement, error) {
	if t := p.peek(); t != nil && t.t == "not" {
		p.pos++
		k, err := p.key()
		return Requirement{Op: "!", Key: k}, err
	}
	k, err := p.key()
	if err != nil {
		return Requirement{}, err
	}
	t := p.peek()
	if t == nil || t.t == "," {
		return Requirement{Op: "exists", Key: k}, nil
	}
	p.pos++
	r := Requirement{Key: k}
	switch {
	case t.t == "=" || t.t == "!=":
		r.Op = t.t
		v, err := p.value()
		r.Values = []string{v}
		return r, err
	case t.t == ">" || t.t == "<":
		r.Op = t.t
		r.N, err = p.integer()
		return r, err
	case t.t == "word" && (t.v == "in" || t.v == "notin"):
		r.Op = t.v
		r.Values, err = p.set()
		return r, err
	}
	return r, fmt.Errorf("expected an operator after %q but found %v", k, *t)
}

// ParseSelector parses kubectl's selector syntax.
func ParseSelector(text string) (*Selector, error) {
	p := parser{toks: lex(text)}
	s := &Selector{}
	if p.peek() != nil {
		for {
			r, err := p.requirement()
			if err != nil {
				return nil, fmt.Errorf("invalid label selector %q: %w", text, err)
			}
			s.Reqs = append(s.Reqs, r)
			t := p.next()
			if t == nil {
				break
			}
			if t.t != "," {
				return nil, fmt.Errorf("invalid label selector %q: expected ',' but found %v", text, *t)
			}
		}
	}
	return s, nil
}

// IsEmpty reports whether the selector matches everything.
func (s *Selector) IsEmpty() bool { return len(s.Reqs) == 0 }

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// Matches reports whether labels match.
func (s *Selector) Matches(labels []Pair) bool {
	for _, r := range s.Reqs {
		v, ok := lookup(labels, r.Key)
		var m bool
		switch r.Op {
		case "=":
			m = ok && v == r.Values[0]
		case "!=":
			m = !ok || v != r.Values[0]
		case "in":
			m = ok && contains(r.Values, v)
		case "notin":
			m = !ok || !contains(r.Values, v)
		case "exists":
			m = ok
		case "!":
			m = !ok
		case ">", "<":
			n, err := strconv.ParseInt(v, 10, 64)
			m = ok && err == nil && ((r.Op == ">" && n > r.N) || (r.Op == "<" && n < r.N))
		}
		if !m {
			return false
		}
	}
	return true
}

// String is the canonical text, which the host's cache accepts.
func (s *Selector) String() string {
	parts := make([]string, len(s.Reqs))
	for i, r := range s.Reqs {
		switch r.Op {
		case "exists":
			parts[i] = r.Key
		case "!":
			parts[i] = "!" + r.Key
		case "in", "notin":
			parts[i] = fmt.Sprintf("%s %s (%s)", r.Key, r.Op, strings.Join(r.Values, ","))
		case ">", "<":
			parts[i] = fmt.Sprintf("%s%s%d", r.Key, r.Op, r.N)
		default:
			parts[i] = r.Key + r.Op + r.Values[0]
		}
	}
	return strings.Join(parts, ",")
}
