job "j" {
  type = "batch"
}
