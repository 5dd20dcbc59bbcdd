"""The package's version (its own module: modules inside read it without importing the
package root)."""
__version__ = "0.3.0.dev0"
