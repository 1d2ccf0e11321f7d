//go:build !wasip1

package kubewasm

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The fake host's label selectors: a port of the host's parser
// (host/src/informer/selector.rs, itself a port of apimachinery's
// labels.Parse), so a selector means in a unit test what it means to the
// host and the API server; checked against the same golden cases.

type selOp uint8

const (
	opIn selOp = iota
	opNotIn
	opEquals
	opDoubleEquals
	opNotEquals
	opGreaterThan
	opLessThan
	opExists
	opDoesNotExist
)

type selRequirement struct {
	key    string
	op     selOp
	values []string
}

// fakeSelector is a parsed label selector: the AND of its requirements,
// sorted by key.
type fakeSelector struct{ reqs []selRequirement }

type selToken uint8

const (
	tkEnd selToken = iota
	tkClosedPar
	tkComma
	tkDoesNotExist
	tkDoubleEquals
	tkEquals
	tkGreaterThan
	tkIdentifier
	tkIn
	tkLessThan
	tkNotEquals
	tkNotIn
	tkOpenPar
)

var selKeywords = map[string]selToken{
	")": tkClosedPar, ",": tkComma, "!": tkDoesNotExist, "==": tkDoubleEquals, "=": tkEquals,
	">": tkGreaterThan, "in": tkIn, "<": tkLessThan, "!=": tkNotEquals, "notin": tkNotIn, "(": tkOpenPar,
}

func selWhitespace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

func selSpecial(b byte) bool {
	return b == '=' || b == '!' || b == '(' || b == ')' || b == ',' || b == '>' || b == '<'
}

type selItem struct {
	tok selToken
	lit string
}

// selLex splits s into apimachinery's tokens.
func selLex(s string) []selItem {
	var items []selItem
	pos := 0
	for {
		for pos < len(s) && selWhitespace(s[pos]) {
			pos++
		}
		if pos >= len(s) || s[pos] == 0 {
			return append(items, selItem{tkEnd, ""})
		}
		start := pos
		if selSpecial(s[pos]) {
			best, end := tkEnd, start
			for pos < len(s) && selSpecial(s[pos]) {
				tok, ok := selKeywords[s[start:pos+1]]
				if !ok {
					break
				}
				pos++
				best, end = tok, pos
			}
			if pos < len(s) && s[pos] == 0 {
				pos++ // the lexer reads a NUL as the end of a token and drops it
			}
			items = append(items, selItem{best, s[start:end]})
			if best == tkEnd {
				// A lone special symbol that is no keyword cannot happen: each
				// alone is one. Guard against looping anyway.
				return append(items, selItem{tkEnd, ""})
			}
			continue
		}
		for pos < len(s) && s[pos] != 0 && !selSpecial(s[pos]) && !selWhitespace(s[pos]) {
			pos++
		}
		lit := s[start:pos]
		if pos < len(s) && s[pos] == 0 {
			pos++
		}
		tok, ok := selKeywords[lit]
		if !ok {
			tok = tkIdentifier
		}
		items = append(items, selItem{tok, lit})
	}
}

type selParser struct {
	items    []selItem
	position int
}

func selFound(it selItem) string {
	if it.tok == tkEnd {
		return "end of string"
	}
	return "'" + it.lit + "'"
}

// lookahead reads the next token; in a values context `in` and `notin`
// are identifiers.
func (p *selParser) lookahead(values bool) selItem {
	it := selItem{tkEnd, ""}
	if p.position < len(p.items) {
		it = p.items[p.position]
	}
	if values && (it.tok == tkIn || it.tok == tkNotIn) {
		it.tok = tkIdentifier
	}
	return it
}

func (p *selParser) consume(values bool) selItem {
	it := p.lookahead(values)
	p.position++
	return it
}

func (p *selParser) parse() ([]selRequirement, error) {
	var reqs []selRequirement
	for {
		it := p.lookahead(true)
		switch it.tok {
		case tkIdentifier, tkDoesNotExist:
			req, err := p.requirement()
			if err != nil {
				return nil, fmt.Errorf("unable to parse requirement: %v", err)
			}
			reqs = append(reqs, req)
			next := p.consume(true)
			switch next.tok {
			case tkEnd:
				return reqs, nil
			case tkComma:
				after := p.lookahead(true)
				if after.tok != tkIdentifier && after.tok != tkDoesNotExist {
					return nil, fmt.Errorf("found %s, expected: identifier after ','", selFound(after))
				}
			default:
				return nil, fmt.Errorf("found %s, expected: ',' or 'end of string'", selFound(next))
			}
		case tkEnd:
			return reqs, nil
		default:
			return nil, fmt.Errorf("found %s, expected: !, identifier, or 'end of string'", selFound(it))
		}
	}
}

func (p *selParser) requirement() (selRequirement, error) {
	it := p.consume(true)
	negated := it.tok == tkDoesNotExist
	if negated {
		it = p.consume(true)
	}
	if it.tok != tkIdentifier {
		return selRequirement{}, fmt.Errorf("found %s, expected: identifier", selFound(it))
	}
	key := it.lit
	if err := selValidateKey(key); err != nil {
		return selRequirement{}, err
	}
	if negated {
		return selNewRequirement(key, opDoesNotExist, nil)
	}
	if next := p.lookahead(true); next.tok == tkEnd || next.tok == tkComma {
		return selNewRequirement(key, opExists, nil)
	}
	opItem := p.consume(false)
	var op selOp
	switch opItem.tok {
	case tkIn:
		op = opIn
	case tkEquals:
		op = opEquals
	case tkDoubleEquals:
		op = opDoubleEquals
	case tkGreaterThan:
		op = opGreaterThan
	case tkLessThan:
		op = opLessThan
	case tkNotIn:
		op = opNotIn
	case tkNotEquals:
		op = opNotEquals
	default:
		return selRequirement{}, fmt.Errorf("found %s, expected: in, notin, =, ==, !=, >, <", selFound(opItem))
	}
	var values []string
	if op == opIn || op == opNotIn {
		v, err := p.values()
		if err != nil {
			return selRequirement{}, err
		}
		values = v
	} else {
		v, err := p.exactValue()
		if err != nil {
			return selRequirement{}, err
		}
		values = []string{v}
	}
	return selNewRequirement(key, op, values)
}

func (p *selParser) values() ([]string, error) {
	it := p.consume(true)
	if it.tok != tkOpenPar {
		return nil, fmt.Errorf("found %s expected: '('", selFound(it))
	}
	var values []string
	switch next := p.lookahead(true); next.tok {
	case tkIdentifier, tkComma:
		v, err := p.identifiers()
		if err != nil {
			return nil, err
		}
		p.consume(true)
		values = v
	case tkClosedPar:
		p.consume(true)
		values = []string{""}
	default:
		return nil, fmt.Errorf("found %s, expected: ',', ')' or identifier", selFound(next))
	}
	sort.Strings(values)
	out := values[:0]
	for i, v := range values {
		if i == 0 || v != values[i-1] {
			out = append(out, v)
		}
	}
	return out, nil
}

func (p *selParser) identifiers() ([]string, error) {
	var values []string
	for {
		it := p.consume(true)
		switch it.tok {
		case tkIdentifier:
			values = append(values, it.lit)
			next := p.lookahead(true)
			switch next.tok {
			case tkComma:
			case tkClosedPar:
				return values, nil
			default:
				return nil, fmt.Errorf("found %s, expected: ',' or ')'", selFound(next))
			}
		case tkComma:
			next := p.lookahead(true)
			if len(values) == 0 || next.tok == tkComma || next.tok == tkClosedPar {
				values = append(values, "")
			}
			if next.tok == tkClosedPar {
				return values, nil
			}
		default:
			return nil, fmt.Errorf("found %s, expected: ',', or identifier", selFound(it))
		}
	}
}

func (p *selParser) exactValue() (string, error) {
	if next := p.lookahead(true); next.tok == tkEnd || next.tok == tkComma {
		return "", nil
	}
	it := p.consume(true)
	if it.tok == tkIdentifier {
		return it.lit, nil
	}
	return "", fmt.Errorf("found %s, expected: identifier", selFound(it))
}

func selAlnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

func selLabelName(s string) bool {
	if s == "" || !selAlnum(s[0]) || !selAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !selAlnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.' {
			return false
		}
	}
	return true
}

func selDNSSubdomain(s string) bool {
	for _, label := range strings.Split(s, ".") {
		if label == "" {
			return false
		}
		lowerDigit := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }
		if !lowerDigit(label[0]) || !lowerDigit(label[len(label)-1]) {
			return false
		}
		for i := 0; i < len(label); i++ {
			if !lowerDigit(label[i]) && label[i] != '-' {
				return false
			}
		}
	}
	return true
}

func selValidateKey(key string) error {
	parts := strings.Split(key, "/")
	var name string
	switch len(parts) {
	case 1:
		name = parts[0]
	case 2:
		prefix := parts[0]
		if prefix == "" || len(prefix) > 253 || !selDNSSubdomain(prefix) {
			return fmt.Errorf("invalid label key %q: bad prefix", key)
		}
		name = parts[1]
	default:
		return fmt.Errorf("invalid label key %q: at most one '/'", key)
	}
	if len(name) > 63 || !selLabelName(name) {
		return fmt.Errorf("invalid label key %q: bad name part", key)
	}
	return nil
}

func selNewRequirement(key string, op selOp, values []string) (selRequirement, error) {
	switch op {
	case opEquals, opDoubleEquals, opNotEquals:
		if len(values) != 1 {
			return selRequirement{}, fmt.Errorf("exact-match compatibility requires one single value")
		}
	case opGreaterThan, opLessThan:
		if len(values) != 1 {
			return selRequirement{}, fmt.Errorf("for 'Gt', 'Lt' operators, exactly one value is required")
		}
		if _, err := strconv.ParseInt(values[0], 10, 64); err != nil {
			return selRequirement{}, fmt.Errorf("invalid value %q for key %q: for 'Gt', 'Lt' operators, the value must be an integer", values[0], key)
		}
	}
	for _, v := range values {
		if len(v) > 63 || (v != "" && !selLabelName(v)) {
			return selRequirement{}, fmt.Errorf("invalid label value %q for key %q", v, key)
		}
	}
	return selRequirement{key: key, op: op, values: values}, nil
}

func (r selRequirement) matches(labels []Pair) bool {
	v, ok := lookup(labels, r.key)
	has := func() bool {
		for _, x := range r.values {
			if x == v {
				return true
			}
		}
		return false
	}
	switch r.op {
	case opIn, opEquals, opDoubleEquals:
		return ok && has()
	case opNotIn, opNotEquals:
		return !ok || !has()
	case opExists:
		return ok
	case opDoesNotExist:
		return !ok
	case opGreaterThan, opLessThan:
		if !ok || len(r.values) != 1 {
			return false
		}
		actual, err1 := strconv.ParseInt(v, 10, 64)
		bound, err2 := strconv.ParseInt(r.values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.op == opGreaterThan {
			return actual > bound
		}
		return actual < bound
	}
	return false
}

func (r selRequirement) String() string {
	var b strings.Builder
	if r.op == opDoesNotExist {
		b.WriteString("!")
	}
	b.WriteString(r.key)
	values := append([]string(nil), r.values...)
	sort.Strings(values)
	joined := strings.Join(values, ",")
	switch r.op {
	case opEquals:
		b.WriteString("=" + joined)
	case opDoubleEquals:
		b.WriteString("==" + joined)
	case opNotEquals:
		b.WriteString("!=" + joined)
	case opGreaterThan:
		b.WriteString(">" + joined)
	case opLessThan:
		b.WriteString("<" + joined)
	case opIn:
		b.WriteString(" in (" + joined + ")")
	case opNotIn:
		b.WriteString(" notin (" + joined + ")")
	}
	return b.String()
}

// parseFakeSelector parses text as the host does.
func parseFakeSelector(text string) (*fakeSelector, error) {
	p := &selParser{items: selLex(text)}
	reqs, err := p.parse()
	if err != nil {
		return nil, fmt.Errorf("invalid selector %q: %v", text, err)
	}
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].key < reqs[j].key })
	return &fakeSelector{reqs: reqs}, nil
}

func (s *fakeSelector) matches(labels []Pair) bool {
	for _, r := range s.reqs {
		if !r.matches(labels) {
			return false
		}
	}
	return true
}

func (s *fakeSelector) String() string {
	parts := make([]string, len(s.reqs))
	for i, r := range s.reqs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}
