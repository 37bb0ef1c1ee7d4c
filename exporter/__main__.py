from .launch import entry

entry()
