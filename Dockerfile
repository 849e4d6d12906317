# The manager image (also runs the standalone registry and boot server: override the command).
# Base images are arguments so that hack/build-image.sh can build the same image from locally
# made Debian bookworm bases where no remote registry is reachable; elsewhere the defaults apply.
ARG GO_IMAGE=golang:1.25-bookworm
ARG NODE_IMAGE=node:20-bookworm-slim

# The Butane translator and Ignition validator (github.com/coreos/ignition/v2, pinned in go.mod).
FROM ${GO_IMAGE} AS ignition-tools
WORKDIR /src
COPY hack/ignition-tools ./
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /ignition-tools .

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY test ./test
COPY bench ./bench
COPY hack/*.ts ./hack/
COPY hack/house ./hack/house
RUN npx tsc -p tsconfig.json && npm prune --omit=dev

FROM ${NODE_IMAGE}
WORKDIR /app
ENV NODE_ENV=production
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist/src ./dist/src
COPY package.json ./
COPY --from=ignition-tools /ignition-tools /usr/local/bin/ignition-tools
USER 65532:65532
ENTRYPOINT ["node", "dist/src/cmd/manager.js"]
