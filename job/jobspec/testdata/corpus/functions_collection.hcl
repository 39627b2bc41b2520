locals {
  base    = { a = "1", b = "2" }
  extra   = { c = "3" }
  merged  = merge(local.base, local.extra)
  names   = sort(keys(local.merged))
  nested  = [["x", "y"], ["z"]]
  flat    = flatten(local.nested)
  pairs   = zipmap(local.names, values(local.merged))
  chunks  = chunklist(local.flat, 2)
  uniq    = distinct(concat(local.flat, ["x"]))
  picked  = lookup(local.merged, "zz", "default")
  sliced  = slice(local.flat, 0, 2)
  numbers = range(1, 4)
}

job "collections" {
  type = "batch"

  meta {
    names   = join(",", local.names)
    flat    = join(",", local.flat)
    picked  = local.picked
    count   = length(local.names)
    first   = element(local.uniq, 0)
    max     = max(local.numbers...)
    has_b   = contains(local.names, "b")
    coalesc = coalesce("", "fallback")
    sliced  = join("", local.sliced)
    setu    = join(",", sort(setunion(["a"], ["b"])))
    idx     = index(local.flat, 1)
  }

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/true"
        args    = formatlist("--tag=%s", local.uniq)
      }
    }
  }
}
