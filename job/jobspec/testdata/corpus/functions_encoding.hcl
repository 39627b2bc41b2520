locals {
  settings = {
    listen  = 8080
    workers = [1, 2]
  }
}

job "encodings" {
  type = "batch"

  group "g" {
    task "t" {
      driver = "raw_exec"

      env {
        SETTINGS_JSON = jsonencode(local.settings)
        SETTINGS_YAML = yamlencode(local.settings)
        TOKEN_B64     = base64encode("user:pass")
        DECODED       = base64decode("aGVsbG8=")
        QUERY         = urlencode("a b&c")
        DIGEST        = sha256("payload")
        MD5           = md5("payload")
        SHA1          = sha1("payload")
        PADDED        = format("%05d", 42)
        TITLE         = title(lower("HELLO WORLD"))
        TRIMMED       = trimspace("  x  ")
        REPLACED      = replace("a-b-c", "-", "_")
        REGEX         = regex_replace("v1.2.3", "^v", "")
        SUBNET        = cidrsubnet("10.199.130.0/24", 4, 2)
        HOST          = cidrhost("10.199.131.0/24", 5)
        PARSED        = parseint("ff", 16)
        FROM_JSON     = jsondecode("{\"k\":\"v\"}").k
        FROM_YAML     = yamldecode("a: b").a
        TRIED         = try(parseint("nope", 10), "not a number")
        CAN           = can(parseint("12", 10))
        STRREV        = strrev("abc")
        SUBSTR        = substr("berth", 0, 3)
        LATER         = timeadd("2024-01-01T00:00:00Z", "1h")
        CONVERTED     = convert(12, string)
      }

      config {
        command = "/usr/bin/env"
      }
    }
  }
}
