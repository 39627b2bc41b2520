job "j" {
  group "g" {
    count = 1
  }
}
