// The console of ap-intake (D38): Swagger UI on the service's own OpenAPI document.
// A separate file, not an inline script: the page's Content-Security-Policy allows scripts
// from the service only.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    // Relative, so the console also works behind a proxy that adds a path prefix.
    url: "../openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    // No badge from validator.swagger.io: nothing is fetched from outside the service.
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
