# trio-pty on Nomad (see docs/deploy.md, "Nomad"): one server per client node, on the node's
# port 8765, named after the node. A session lives and dies with its allocation; its id names
# the node, and Consul DNS (<node>.node.consul) leads a client back to it.
# Store the token first:  nomad var put nomad/jobs/trio-pty token=@token
job "trio-pty" {
  type = "service"

  group "trio-pty" {
    count = 3

    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    network {
      port "rpc" {
        static = 8765
        to     = 8765
      }
    }

    update {
      max_parallel = 1
      health_check = "checks"
    }

    service {
      name     = "trio-pty"
      port     = "rpc"
      provider = "consul"

      # Critical while draining (GET /healthz answers 503). No check_restart: restarting a
      # draining allocation would kill the sessions the drain is waiting for.
      check {
        type     = "http"
        path     = "/healthz"
        interval = "5s"
        timeout  = "2s"
      }
    }

    task "server" {
      driver = "docker"

      # SIGTERM starts the bounded teardown (close_timeout, 27 s). Nomad's default kill_timeout
      # (5 s) would cut it short; the client's max_kill_timeout (30 s by default) caps this.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      config {
        image = "registry.example.com/trio-pty:0.1.0"
        ports = ["rpc"]
        # The image's entrypoint is `tini -- trio-pty serve`; these are serve's options.
        args = [
          "--host", "0.0.0.0",
          "--port", "8765",
          "--node-id", "${node.unique.name}",
          "--allow-host", "${node.unique.name}.node.consul",
          "--allow-host", "${NOMAD_IP_rpc}",
          "--token-file", "/secrets/token",
          "--log-format", "json",
        ]
      }

      # The token file must belong to the server's user (10001 in the image), mode 0600 or
      # stricter. A new token must not restart the task (that would kill every session).
      template {
        data        = "{{ with nomadVar \"nomad/jobs/trio-pty\" }}{{ .token }}{{ end }}"
        destination = "secrets/token"
        perms       = "400"
        uid         = 10001
        gid         = 10001
        change_mode = "noop"
      }

      resources {
        cpu    = 500
        memory = 1024
      }
    }
  }
}
