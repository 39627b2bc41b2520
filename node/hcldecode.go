package node

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"
)

// decodeBody decodes body into the struct v, as gohcl.DecodeBody does for
// the tags berth's settings use: attributes (hcl:"name" required,
// hcl:"name,optional") and single blocks without labels
// (hcl:"name,block" on a pointer to a struct, decoded over what is
// there). Its own code rather than gohcl's: gohcl also encodes, through
// hclwrite, which links go-cmp and its package init into every berth
// command.
func decodeBody(body hcl.Body, v reflect.Value) hcl.Diagnostics {
	schema, fields := bodySchema(v.Type())
	content, diags := body.Content(schema)
	for _, attr := range content.Attributes {
		diags = append(diags, decodeAttr(attr, v.Field(fields[attr.Name]))...)
	}
	seen := map[string]*hcl.Block{}
	for _, blk := range content.Blocks {
		if f := v.Field(fields[blk.Type]); f.Kind() == reflect.Slice {
			diags = append(diags, decodeLabeled(blk, f, seen)...)
			continue
		}
		if first := seen[blk.Type]; first != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Duplicate %s block", blk.Type),
				Detail:   fmt.Sprintf("Only one %s block is allowed. Another was defined at %s.", blk.Type, first.DefRange.String()),
				Subject:  blk.DefRange.Ptr(),
			})
			continue
		}
		seen[blk.Type] = blk
		f := v.Field(fields[blk.Type])
		if f.IsNil() {
			f.Set(reflect.New(f.Type().Elem()))
		}
		diags = append(diags, decodeBody(blk.Body, f.Elem())...)
	}
	return diags
}

// bodySchema is the schema of struct type t's hcl tags, and the index of
// the field of each attribute and block name.
func bodySchema(t reflect.Type) (*hcl.BodySchema, map[string]int) {
	schema := &hcl.BodySchema{}
	fields := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("hcl")
		if tag == "" {
			continue
		}
		name, kind, _ := strings.Cut(tag, ",")
		fields[name] = i
		switch kind {
		case "block":
			ft := t.Field(i).Type
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Pointer && ft.Elem().Elem().Kind() == reflect.Struct {
				schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: name, LabelNames: labelNames(ft.Elem().Elem())})
				continue
			}
			if ft.Kind() != reflect.Pointer || ft.Elem().Kind() != reflect.Struct {
				panic(fmt.Sprintf("node: block %q of %s is a %s, not a pointer to a struct", name, t, ft))
			}
			schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: name})
		case "label":
			// decodeLabeled sets it from the block's header.
		case "", "optional":
			schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: name, Required: kind == ""})
		default:
			panic(fmt.Sprintf("node: hcl tag %q of %s: only attributes, blocks and labels are decoded", tag, t))
		}
	}
	return schema, fields
}

// decodeAttr evaluates attr (no variables, no functions) into f, converted
// to f's type.
func decodeAttr(attr *hcl.Attribute, f reflect.Value) hcl.Diagnostics {
	val, diags := attr.Expr.Value(nil)
	if diags.HasErrors() {
		return diags
	}
	unsuitable := func(err error) hcl.Diagnostics {
		return append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unsuitable value type",
			Detail:   fmt.Sprintf("Unsuitable value: %s", err.Error()),
			Subject:  attr.Expr.StartRange().Ptr(),
			Context:  attr.Expr.Range().Ptr(),
		})
	}
	ty, err := gocty.ImpliedType(f.Addr().Interface())
	if err != nil {
		panic(fmt.Sprintf("node: setting %q: %v", attr.Name, err))
	}
	if val, err = convert.Convert(val, ty); err != nil {
		return unsuitable(err)
	}
	if err := gocty.FromCtyValue(val, f.Addr().Interface()); err != nil {
		return unsuitable(err)
	}
	return diags
}

// labelNames are the hcl:"name,label" fields of struct type t, in order.
func labelNames(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if name, kind, _ := strings.Cut(t.Field(i).Tag.Get("hcl"), ","); kind == "label" {
			out = append(out, name)
		}
	}
	return out
}

// decodeLabeled appends blk to the slice f (hcl:"name,block" on a slice
// of pointers to structs with label fields, such as host_volume "name"
// { ... }); two blocks with the same labels are an error.
func decodeLabeled(blk *hcl.Block, f reflect.Value, seen map[string]*hcl.Block) hcl.Diagnostics {
	key := blk.Type + "\x00" + strings.Join(blk.Labels, "\x00")
	if first := seen[key]; first != nil {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  fmt.Sprintf("Duplicate %s %q block", blk.Type, strings.Join(blk.Labels, " ")),
			Detail:   fmt.Sprintf("Another was defined at %s.", first.DefRange.String()),
			Subject:  blk.DefRange.Ptr(),
		}}
	}
	seen[key] = blk
	e := reflect.New(f.Type().Elem().Elem())
	li := 0
	for i := 0; i < e.Elem().NumField(); i++ {
		if _, kind, _ := strings.Cut(e.Elem().Type().Field(i).Tag.Get("hcl"), ","); kind == "label" {
			e.Elem().Field(i).SetString(blk.Labels[li])
			li++
		}
	}
	diags := decodeBody(blk.Body, e.Elem())
	f.Set(reflect.Append(f, e))
	return diags
}
