# The demo service: a static HTTP server on 8080 answering "hello from
# <hostname>", with a health check of its own (exec form: the image has no
# shell). Built by `make image` from internal/dockertest/helloserver.
FROM scratch
COPY hello /hello
EXPOSE 8080
HEALTHCHECK --interval=2s --timeout=2s --retries=2 CMD ["/hello", "-healthcheck"]
ENTRYPOINT ["/hello"]
