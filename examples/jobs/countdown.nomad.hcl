# A batch job that prints a few lines and exits: what `nomad alloc logs -f`
# follows to its end.
job "countdown" {
  type = "batch"

  group "count" {
    network {
      mode = "cni/private"
    }

    task "count" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "for i in 3 2 1; do echo $i; sleep 1; done; echo liftoff"]
      }
    }
  }
}
