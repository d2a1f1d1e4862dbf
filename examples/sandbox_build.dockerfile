# The image of examples/sandbox_build.bot: built by iterion before the run, from the local test image (no
# registry needed; `cargo xtask images` makes it). Replace the base with your own toolchain image.
FROM iterion-test/busybox:latest
ARG VERSION=0.0.0
RUN mkdir -p /opt/tool && echo "tool ${VERSION}" > /opt/tool/VERSION
