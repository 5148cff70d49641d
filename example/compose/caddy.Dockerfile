# Caddy with caddy-dicer, from nothing but what `make image` puts beside
# this file: the static binary (xcaddy, CGO_ENABLED=0) and the build
# machine's CA certificates. No base image, so nothing is pulled.
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY caddy /usr/bin/caddy
COPY Caddyfile /etc/caddy/Caddyfile
ENV HOME=/data XDG_CONFIG_HOME=/config XDG_DATA_HOME=/data
EXPOSE 80 443
ENTRYPOINT ["/usr/bin/caddy"]
CMD ["run", "--config", "/etc/caddy/Caddyfile", "--adapter", "caddyfile"]
