# The manager image (also runs the standalone registry and boot server: override the command).
FROM node:20-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY test ./test
COPY bench ./bench
COPY hack/*.ts ./hack/
RUN npx tsc -p tsconfig.json && npm prune --omit=dev

FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist/src ./dist/src
COPY package.json ./
USER 65532:65532
ENTRYPOINT ["node", "dist/src/cmd/manager.js"]
